// RUN: shardc-opt %s --split-input-file --verify-diagnostics --shardc-drop-shardings
// RUN: shardc-opt %s -split-input-file -verify-diagnostics -shardc-drop-shardings | filecheck %s

// Every designator form matches (@+N, @-N, @above, @below, plain, -re).
// CHECK: func.func @ok
// CHECK: // -----
sdy.mesh @mesh = <["q"=2]>
func.func @ok(%arg0: tensor<8xf32>) -> tensor<8xf32> {
  // expected-warning@+1 {{keeps its shardings}}
  %0 = sdy.manual_computation(%arg0) in_shardings=[<@mesh, [{"q"}]>] out_shardings=[<@mesh, [{"q"}]>] manual_axes={"q"} (%a: tensor<4xf32>) {
    sdy.return %a : tensor<4xf32>
  } : (tensor<8xf32>) -> tensor<8xf32>
  // expected-warning@below {{'sdy.manual_computation' keeps}}
  %1 = sdy.manual_computation(%0) in_shardings=[<@mesh, [{"q"}]>] out_shardings=[<@mesh, [{"q"}]>] manual_axes={"q"} (%a: tensor<4xf32>) {
    sdy.return %a : tensor<4xf32>
  } : (tensor<8xf32>) -> tensor<8xf32>
  %2 = sdy.manual_computation(%1) in_shardings=[<@mesh, [{"q"}]>] out_shardings=[<@mesh, [{"q"}]>] manual_axes={"q"} (%a: tensor<4xf32>) {
  // expected-warning@above {{keeps its shardings}}
    sdy.return %a : tensor<4xf32>
  } : (tensor<8xf32>) -> tensor<8xf32>
  %3 = sdy.manual_computation(%2) in_shardings=[<@mesh, [{"q"}]>] out_shardings=[<@mesh, [{"q"}]>] manual_axes={"q"} (%a: tensor<4xf32>) {
    sdy.return %a : tensor<4xf32>
  } : (tensor<8xf32>) -> tensor<8xf32>
  // expected-warning-re@-3 {{'sdy.{{[a-z_]+}}' keeps {{.*}} shardings}}
  return %3 : tensor<8xf32>
}

// -----

// Parse errors are diagnostics too.
func.func @parse() {
  // expected-error@+1 {{custom op 'stablehlo.bogus' is unknown}}
  stablehlo.bogus
}

// -----

// Notes are matched like diagnostics (here from the sdy verifier).
sdy.mesh @a = <["x"=2]>
sdy.mesh @b = <["y"=2]>
func.func @notes(%arg0: tensor<8xf32>) -> tensor<8xf32> {
  // expected-note@+1 {{operand mesh: #sdy.mesh<["x"=2]>}}
  %0 = sdy.sharding_constraint %arg0 <@a, [{"x"}]> : tensor<8xf32>
  // expected-error@+1 {{result mesh does not match operand mesh}}
  %1 = sdy.all_gather [{"x"}] %0 out_sharding=<@b, [{}]> : tensor<8xf32>
  return %1 : tensor<8xf32>
}
