// RUN: shardc-opt %s --split-input-file --shardc-lift-inlined-meshes | filecheck %s
// RUN: shardc-opt %s --split-input-file --sdy-lift-inlined-meshes | filecheck %s
// RUN: shardc-opt %s --split-input-file -shardc-lift-inlined-meshes='add-stablehlo-mesh=false' | filecheck %s --check-prefix=PLAIN
// RUN: shardc-opt %s --split-input-file --shardc-lift-inlined-meshes='report-duplicates=true' --verify-diagnostics | filecheck %s

// An inline mesh used twice becomes one @mesh; the empty mesh gets its own name.
// CHECK:      sdy.mesh @mesh = <["x"=2, "y"=4]> {stablehlo.mesh = {axes = [{name = "x", size = 2 : i64}, {name = "y", size = 4 : i64}]}}
// CHECK-NEXT: sdy.mesh @empty_mesh = <[]> {stablehlo.mesh = {axes = []}}
// CHECK-LABEL: func @two_args
// CHECK-SAME:  #sdy.sharding<@mesh, [{"x"}, {}]>
// CHECK-SAME:  #sdy.sharding<@mesh, [{}, {"y"}]>
// CHECK-SAME:  -> (tensor<8x8xf32> {sdy.sharding = #sdy.sharding<@empty_mesh, [{}, {}]>})
// PLAIN:      sdy.mesh @mesh = <["x"=2, "y"=4]>{{$}}
// PLAIN-NEXT: sdy.mesh @empty_mesh = <[]>{{$}}
func.func @two_args(%arg0: tensor<8x8xf32> {sdy.sharding = #sdy.sharding<mesh<["x"=2, "y"=4]>, [{"x"}, {}]>},
                    %arg1: tensor<8x8xf32> {sdy.sharding = #sdy.sharding<mesh<["x"=2, "y"=4]>, [{}, {"y"}]>})
    -> (tensor<8x8xf32> {sdy.sharding = #sdy.sharding<mesh<[]>, [{}, {}]>}) {
  %0 = stablehlo.add %arg0, %arg1 : tensor<8x8xf32>
  return %0 : tensor<8x8xf32>
}

// -----

// An existing symbol with the same mesh is reused; new meshes go after it and
// take the next free name; maximal meshes are named after their device.
// CHECK:      sdy.mesh @mesh = <["a"=4]>
// CHECK-NEXT: sdy.mesh @maximal_mesh_3 = <[], device_ids=[3]>
// CHECK-NEXT: sdy.mesh @mesh_0 = <["z"=8]>
// CHECK-LABEL: func @ops
// CHECK:      stablehlo.add %arg0, %arg0 {sdy.sharding = #sdy.sharding_per_value<[<@mesh, [{"a"}]>]>}
// CHECK:      sdy.sharding_per_value<[<@maximal_mesh_3, []>]>
// CHECK:      sdy.reshard %1 <@mesh_0, [{"z"}]>
// CHECK:      sdy.sharding_constraint %2 <@mesh, [{}]>
sdy.mesh @mesh = <["a"=4]>
func.func @ops(%arg0: tensor<8xf32>) -> tensor<8xf32> {
  %0 = stablehlo.add %arg0, %arg0 {sdy.sharding = #sdy.sharding_per_value<[<mesh<["a"=4]>, [{"a"}]>]>} : tensor<8xf32>
  %1 = stablehlo.custom_call @foo(%0) {sdy.sharding = #sdy.sharding_per_value<[<mesh<[], device_ids=[3]>, []>]>} : (tensor<8xf32>) -> tensor<8xf32>
  %2 = sdy.reshard %1 <mesh<["z"=8]>, [{"z"}]> : tensor<8xf32>
  %3 = sdy.sharding_constraint %2 <mesh<["a"=4]>, [{}]> : tensor<8xf32>
  return %3 : tensor<8xf32>
}

// -----

// Duplicate mesh symbols are merged into the first one and references follow.
// CHECK-LABEL: func @dup
// CHECK-SAME:  #sdy.sharding<@a, [{}]>
// CHECK:       sdy.mesh @a = <["y"=2]>
// CHECK-NOT:   sdy.mesh @c
func.func @dup(%arg0: tensor<8xf32> {sdy.sharding = #sdy.sharding<@c, [{}]>}) -> tensor<8xf32> {
  return %arg0 : tensor<8xf32>
}
sdy.mesh @a = <["y"=2]>
// expected-remark@+1 {{mesh @c duplicates @a; merged}}
sdy.mesh @c = <["y"=2]>

// -----

// Meshes inside manual computations are lifted too.
// CHECK:       sdy.mesh @mesh = <["q"=2]>
// CHECK-LABEL: func @manual
// CHECK:       in_shardings=[<@mesh, [{"q"}]>] out_shardings=[<@mesh, [{"q"}]>]
func.func @manual(%arg0: tensor<8xf32>) -> tensor<8xf32> {
  %0 = sdy.manual_computation(%arg0) in_shardings=[<mesh<["q"=2]>, [{"q"}]>] out_shardings=[<mesh<["q"=2]>, [{"q"}]>] manual_axes={"q"} (%a: tensor<4xf32>) {
    sdy.return %a : tensor<4xf32>
  } : (tensor<8xf32>) -> tensor<8xf32>
  return %0 : tensor<8xf32>
}
