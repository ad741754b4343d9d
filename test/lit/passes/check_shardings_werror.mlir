// RUN: shardc-opt %s --split-input-file --shardc-check-shardings='werror=true' --verify-diagnostics
// RUN: shardc-opt %s --split-input-file --shardc-check-shardings='assume-replicated=true replicated-threshold-bytes=100000' 2>&1 | filecheck %s

// werror=true turns every warning into an error (and fails the pass).
sdy.mesh @m = <["x"=4, "y"=2]>
// expected-error@+1 {{dimension 0 of size 6 is not divisible by 4 ("x"): XLA pads it to 8, 25% of each shard is padding [indivisible-dimension]}}
func.func @werror(%arg0: tensor<6xf32> {sdy.sharding = #sdy.sharding<@m, [{"x"}]>}) -> (tensor<6xf32> {sdy.sharding = #sdy.sharding<@m, [{"x"}]>}) {
  return %arg0 : tensor<6xf32>
}

// -----

// assume-replicated=true: values without a sharding are replicated, as XLA
// sees them once propagation is over, so the transpose's operand is gathered
// and the unsharded result counts as replicated.
sdy.mesh @m = <["x"=4, "y"=2]>
func.func @assume_replicated(%arg0: tensor<16x16xf32> {sdy.sharding = #sdy.sharding<@m, [{"x"}, {}]>}) -> tensor<16x16xf32> {
  // CHECK: :[[# @LINE + 2]]:8: warning: implicit reshard: operand 0 (tensor<16x16xf32>) needs an all-gather over "x", 1024 bytes per device (sharded [{"x"}, {}], the op needs [{}, {}]) [implicit-reshard]
  // CHECK: :[[# @LINE + 1]]:8: warning: result 0 (tensor<16x16xf32>) is replicated although argument 0 is sharded: every device holds all 1024 bytes [replicated-output]
  %0 = stablehlo.transpose %arg0, dims = [1, 0] : (tensor<16x16xf32>) -> tensor<16x16xf32>
  return %0 : tensor<16x16xf32>
}
