// Pass flags run in command-line order; -x and --x are the same flag.
// RUN: shardc-opt %s -shardc-lift-inlined-meshes -shardc-drop-shardings | filecheck %s --check-prefix=DROP
// RUN: shardc-opt %s --shardc-drop-shardings='keep-meshes=true strict=false' | filecheck %s --check-prefix=KEEP
// RUN: shardc-opt %s --shardc-lift-inlined-meshes=add-stablehlo-mesh=false --symbol-dce --cse --canonicalize --inline | filecheck %s --check-prefix=LIFT
// RUN: shardc-opt %s | filecheck %s --check-prefix=NOPASS

// DROP-NOT: sdy.
// DROP: func.func @f(%arg0: tensor<8xf32>) -> tensor<8xf32>
// KEEP: sdy.mesh @m = <["y"=2]>
// KEEP: func.func @f(%arg0: tensor<8xf32>) -> tensor<8xf32>
// LIFT: sdy.mesh @m = <["y"=2]>{{$}}
// LIFT-NEXT: sdy.mesh @mesh = <["x"=2]>{{$}}
// NOPASS: #sdy.sharding<mesh<["x"=2]>, [{"x"}]>
sdy.mesh @m = <["y"=2]>
func.func @f(%arg0: tensor<8xf32> {sdy.sharding = #sdy.sharding<mesh<["x"=2]>, [{"x"}]>}) -> tensor<8xf32> {
  return %arg0 : tensor<8xf32>
}
