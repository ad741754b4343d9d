// RUN: shardc-opt %s --split-input-file --strict --verify-diagnostics

// Padding of an indivisible dimension is an error in strict mode.
sdy.mesh @m = <["x"=4]>
// expected-error@+1 {{dimension 0 of size 6 is not divisible by 4 ("x"): XLA pads it to 8, 25% of each shard is padding [indivisible-dimension]}}
func.func @padding(%arg0: tensor<6xf32> {sdy.sharding = #sdy.sharding<@m, [{"x"}]>}) -> tensor<6xf32> {
  return %arg0 : tensor<6xf32>
}

// -----

// A custom call without a sharding rule replicates its sharded operand.
sdy.mesh @m = <["x"=4]>
func.func @no_rule(%arg0: tensor<8x8xf32> {sdy.sharding = #sdy.sharding<@m, [{"x"}, {}]>}) -> (tensor<8x8xf32> {sdy.sharding = #sdy.sharding<@m, [{}, {}]>}) {
  // expected-error@+1 {{custom call @strict_test_kernel has no sharding rule: its 1 sharded operand(s) are replicated (all-gathered) around it; register one with shardc.compiler.register_sharding_rule [no-sharding-rule]}}
  %0 = stablehlo.custom_call @strict_test_kernel(%arg0) : (tensor<8x8xf32>) -> tensor<8x8xf32>
  return %0 : tensor<8x8xf32>
}

// -----

// An implicit reshard (the transpose needs its operand gathered) is an error.
sdy.mesh @m = <["x"=4]>
func.func @reshard(%arg0: tensor<16x16xf32> {sdy.sharding = #sdy.sharding<@m, [{"x"}, {}]>}) -> (tensor<16x16xf32> {sdy.sharding = #sdy.sharding<@m, [{"x"}, {}]>}) {
  // expected-error@+1 {{implicit reshard}}
  %0 = stablehlo.transpose %arg0, dims = [1, 0] : (tensor<16x16xf32>) -> tensor<16x16xf32>
  return %0 : tensor<16x16xf32>
}
