// RUN: shardc-opt %s --split-input-file --shardc-check-shardings --verify-diagnostics

// Errors of shardc-check-shardings (what the sdy verifier lets through), then
// the structural errors the sdy verifier itself already rejects at parse time,
// so every error kind the issue lists has a test here.

// Two meshes with different device counts in one program.
sdy.mesh @m = <["x"=4, "y"=2]>
// expected-error@+1 {{mesh @n has 4 devices but mesh @m has 8; all shardings of one program must use meshes of the same device count [mesh-device-count]}}
sdy.mesh @n = <["a"=4]>
func.func @device_counts(%arg0: tensor<8xf32> {sdy.sharding = #sdy.sharding<@m, [{"x"}]>},
                         %arg1: tensor<8xf32> {sdy.sharding = #sdy.sharding<@m, [{"x"}]>},
                         %arg2: tensor<8xf32> {sdy.sharding = #sdy.sharding<@n, [{"a"}]>}) -> (tensor<8xf32> {sdy.sharding = #sdy.sharding<@m, [{"x"}]>}) {
  %0 = stablehlo.add %arg0, %arg1 {sdy.sharding = #sdy.sharding_per_value<[<@m, [{"x"}]>]>} : tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

// Meshes of the same device count, an unused mesh and a maximal mesh are fine.
sdy.mesh @m = <["x"=4, "y"=2]>
sdy.mesh @m2 = <["z"=8]>
sdy.mesh @unused = <["a"=3]>
sdy.mesh @maximal = <[], device_ids=[0]>
func.func @same_device_counts(%arg0: tensor<8xf32> {sdy.sharding = #sdy.sharding<@m, [{"x"}]>},
                              %arg1: tensor<8xf32> {sdy.sharding = #sdy.sharding<@m2, [{"z"}]>},
                              %arg2: tensor<f32> {sdy.sharding = #sdy.sharding<@maximal, []>}) -> tensor<8xf32> {
  return %arg0 : tensor<8xf32>
}

// -----

// A sharding inside a manual computation on another mesh than the computation's.
sdy.mesh @m = <["x"=4, "y"=2]>
sdy.mesh @n = <["a"=8]>
func.func @manual_mesh_mismatch(%arg0: tensor<8xf32> {sdy.sharding = #sdy.sharding<@m, [{"x"}]>}) -> (tensor<8xf32> {sdy.sharding = #sdy.sharding<@m, [{"x"}]>}) {
  %0 = sdy.manual_computation(%arg0) in_shardings=[<@m, [{"x"}]>] out_shardings=[<@m, [{"x"}]>] manual_axes={"x"} (%a: tensor<2xf32>) {
    // expected-error@+1 {{sharding on mesh @n inside a manual computation over mesh @m; ops in a manual computation must use its mesh [manual-mesh-mismatch]}}
    %1 = stablehlo.add %a, %a {sdy.sharding = #sdy.sharding_per_value<[<@n, [{}]>]>} : tensor<2xf32>
    sdy.return %1 : tensor<2xf32>
  } : (tensor<8xf32>) -> tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

// A constraint straight on a pinned argument that asks for other axes.
sdy.mesh @m = <["x"=4, "y"=2]>
func.func @constraint_vs_pinned_arg(%arg0: tensor<16x16xf32> {sdy.sharding = #sdy.sharding<@m, [{"x"}, {}]>}) -> (tensor<16x16xf32> {sdy.sharding = #sdy.sharding<@m, [{}, {"x"}]>}) {
  // expected-error@+1 {{sharding constraint <@m, [{}, {"x"}]> contradicts the pinned sharding <@m, [{"x"}, {}]> of argument 0 (all-to-all over "x", 256 bytes per device) [constraint-contradicts-pinned]}}
  %0 = sdy.sharding_constraint %arg0 <@m, [{}, {"x"}]> : tensor<16x16xf32>
  return %0 : tensor<16x16xf32>
}

// -----

// A constraint returned straight as a pinned result that says otherwise.
sdy.mesh @m = <["x"=4, "y"=2]>
func.func @constraint_vs_pinned_result(%arg0: tensor<16x16xf32>) -> (tensor<16x16xf32> {sdy.sharding = #sdy.sharding<@m, [{}, {"x"}]>}) {
  // expected-error@+1 {{contradicts the pinned sharding <@m, [{}, {"x"}]> of result 0 (all-gather over "y", 1024 bytes per device) [constraint-contradicts-pinned]}}
  %0 = sdy.sharding_constraint %arg0 <@m, [{"y"}, {}]> : tensor<16x16xf32>
  // expected-warning@+1 {{implicit reshard: result 0 (tensor<16x16xf32>) needs an all-gather over "y", 1024 bytes per device (returned [{"y"}, {}] as result 0, declared [{}, {"x"}]) [implicit-reshard]}}
  return %0 : tensor<16x16xf32>
}

// -----

// Constraints that agree with the pinned shardings, or refine an open prefix, are fine.
sdy.mesh @m = <["x"=4, "y"=2]>
func.func @constraint_agrees(%arg0: tensor<16x16xf32> {sdy.sharding = #sdy.sharding<@m, [{"x", "y"}, {}]>}) -> (tensor<16x16xf32> {sdy.sharding = #sdy.sharding<@m, [{"x", "y"}, {}]>}) {
  %0 = sdy.sharding_constraint %arg0 <@m, [{"x", ?}, {?}]> : tensor<16x16xf32>
  return %0 : tensor<16x16xf32>
}

// -----

// Verifier: unknown mesh.
// expected-error@+1 {{'func.func' op arg 0 - unknown mesh: @nomesh}}
func.func @unknown_mesh(%arg0: tensor<8xf32> {sdy.sharding = #sdy.sharding<@nomesh, [{"x"}]>}) -> tensor<8xf32> {
  return %arg0 : tensor<8xf32>
}

// -----

// Verifier: unknown axis.
sdy.mesh @m = <["x"=4, "y"=2]>
// expected-error@+1 {{'func.func' op arg 0 - unknown axis name: "z"}}
func.func @unknown_axis(%arg0: tensor<8xf32> {sdy.sharding = #sdy.sharding<@m, [{"z"}]>}) -> tensor<8xf32> {
  return %arg0 : tensor<8xf32>
}

// -----

// Verifier: an axis used twice.
sdy.mesh @m = <["x"=4, "y"=2]>
func.func @axis_twice(%arg0: tensor<8x8xf32>) -> tensor<8x8xf32> {
  // expected-error@+1 {{'stablehlo.add' op result - duplicate axis ref: "x"}}
  %0 = stablehlo.add %arg0, %arg0 {sdy.sharding = #sdy.sharding_per_value<[<@m, [{"x"}, {"x"}]>]>} : tensor<8x8xf32>
  return %0 : tensor<8x8xf32>
}

// -----

// Verifier: sharding rank mismatch.
sdy.mesh @m = <["x"=4, "y"=2]>
// expected-error@+1 {{'func.func' op arg 0 - sharding doesn't match tensor rank: 1 != 2}}
func.func @rank_mismatch(%arg0: tensor<8x8xf32> {sdy.sharding = #sdy.sharding<@m, [{"x"}]>}) -> tensor<8x8xf32> {
  return %arg0 : tensor<8x8xf32>
}

// -----

// Verifier: manual axes misuse, a constraint on an axis a parent made manual.
sdy.mesh @m = <["x"=4, "y"=2]>
func.func @manual_axis_bound(%arg0: tensor<8xf32> {sdy.sharding = #sdy.sharding<@m, [{"x"}]>}) -> tensor<8xf32> {
  // expected-note@+1 {{parent bounding this axis as manual}}
  %0 = sdy.manual_computation(%arg0) in_shardings=[<@m, [{"x"}]>] out_shardings=[<@m, [{"x"}]>] manual_axes={"x"} (%a: tensor<2xf32>) {
    // expected-error@+1 {{'sdy.sharding_constraint' op operates on axis "x" which is already bound by a parent sdy.manual_computation op}}
    %1 = sdy.sharding_constraint %a <@m, [{"x"}]> : tensor<2xf32>
    sdy.return %1 : tensor<2xf32>
  } : (tensor<8xf32>) -> tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

// Verifier: manual axes misuse, a manual axis after a free one.
sdy.mesh @m = <["x"=4, "y"=2]>
func.func @manual_axis_order(%arg0: tensor<8xf32>) -> tensor<8xf32> {
  // expected-error@+1 {{must have all manual axes come before free axes in its dimension sharding at index 0. Saw manual axis "x" after free axis "y"}}
  %0 = sdy.manual_computation(%arg0) in_shardings=[<@m, [{"y", "x"}]>] out_shardings=[<@m, [{"x"}]>] manual_axes={"x"} (%a: tensor<1xf32>) {
    sdy.return %a : tensor<1xf32>
  } : (tensor<8xf32>) -> tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

// Verifier: a manual dimension its manual axes do not divide.
sdy.mesh @m = <["x"=4, "y"=2]>
func.func @manual_indivisible(%arg0: tensor<6xf32>) -> tensor<6xf32> {
  // expected-error@+1 {{operand dimension size 6 is not divisible by the manual axes size 4}}
  %0 = sdy.manual_computation(%arg0) in_shardings=[<@m, [{"x"}]>] out_shardings=[<@m, [{"x"}]>] manual_axes={"x"} (%a: tensor<1xf32>) {
    sdy.return %a : tensor<1xf32>
  } : (tensor<6xf32>) -> tensor<6xf32>
  return %0 : tensor<6xf32>
}
