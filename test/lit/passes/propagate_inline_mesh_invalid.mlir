// RUN: shardc-opt %s -split-input-file -shardc-basic-propagate -verify-diagnostics
// RUN: shardc-opt %s -split-input-file -sdy-user-priority-propagate -verify-diagnostics

// An inline mesh is refused with a diagnostic (Shardy's native pass crashes on it).
// expected-error @+1 {{needs meshes as sdy.mesh symbols, but 'arg_attrs' writes its mesh inline}}
func.func @main(%arg0: tensor<8xf32> {sdy.sharding = #sdy.sharding<mesh<["x"=2]>, [{"x"}]>}) -> tensor<8xf32> {
  %0 = stablehlo.negate %arg0 : tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

sdy.mesh @mesh = <["x"=2]>
func.func @main(%arg0: tensor<8xf32>) -> tensor<8xf32> {
  // expected-error @+1 {{but 'sharding' writes its mesh inline}}
  %0 = sdy.sharding_constraint %arg0 <mesh<["x"=2]>, [{"x"}]> : tensor<8xf32>
  return %0 : tensor<8xf32>
}
