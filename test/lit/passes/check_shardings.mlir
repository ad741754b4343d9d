// RUN: shardc-opt %s --split-input-file --shardc-check-shardings='replicated-threshold-bytes=4096' --verify-diagnostics | filecheck %s
// RUN: shardc-opt %s --split-input-file --shardc-check-shardings='replicated-threshold-bytes=4096 reshard-threshold-bytes=1000000' 2>&1 | filecheck %s --check-prefix=QUIET

// Warnings of shardc-check-shardings; the module is printed unchanged. The
// second RUN line raises the reshard threshold: no implicit-reshard warning.
// QUIET-NOT: [implicit-reshard]

// A dimension its axes do not divide: XLA pads it. The slice's padded shards of 3
// start off the operand's shards of 4, so a halo moves between neighbours (XLA
// compiles a 72-byte collective-permute after the all-to-all).
// CHECK-LABEL: func @indivisible(
sdy.mesh @m = <["x"=4, "y"=2]>
// expected-warning@+2 {{dimension 0 of size 6 is not divisible by 4 ("x"): XLA pads it to 8, 25% of each shard is padding [indivisible-dimension]}}
// expected-warning@+1 {{dimension 1 of size 12 is not divisible by 8 ("x", "y"): XLA pads it to 16, 25% of each shard is padding [indivisible-dimension]}}
func.func @indivisible(%arg0: tensor<6x16xf32> {sdy.sharding = #sdy.sharding<@m, [{"x"}, {}]>}, %arg1: tensor<4x12xf32> {sdy.sharding = #sdy.sharding<@m, [{}, {"x", "y"}]>}) -> (tensor<6x16xf32> {sdy.sharding = #sdy.sharding<@m, [{"x"}, {}]>}) {
  // expected-warning@+3 {{dimension 1 of size 10 is not divisible by 4 ("x")}}
  // expected-warning@+2 {{implicit reshard: operand 0 (tensor<6x16xf32>) needs an all-to-all over "x"}}
  // expected-warning@+1 {{implicit reshard: operand 0 (tensor<6x16xf32>) needs a collective-permute over "x", 72 bytes per device (halo of a windowed read of a sharded dimension) [implicit-reshard]}}
  %0 = stablehlo.slice %arg0 [0:6, 0:10] {sdy.sharding = #sdy.sharding_per_value<[<@m, [{}, {"x"}]>]>} : (tensor<6x16xf32>) -> tensor<6x10xf32>
  return %arg0 : tensor<6x16xf32>
}

// -----

// An operand that must be all-gathered because the op's rule and result say
// otherwise (dot_general: lhs and rhs both use "x" for the output's dims).
// CHECK-LABEL: func @implicit_all_gather(
sdy.mesh @m = <["x"=4, "y"=2]>
func.func @implicit_all_gather(%arg0: tensor<16x32xf32> {sdy.sharding = #sdy.sharding<@m, [{"x"}, {}]>},
                               %arg1: tensor<32x64xf32> {sdy.sharding = #sdy.sharding<@m, [{}, {"x"}]>}) -> (tensor<16x64xf32> {sdy.sharding = #sdy.sharding<@m, [{"x"}, {}]>}) {
  // expected-warning@+1 {{implicit reshard: operand 1 (tensor<32x64xf32>) needs an all-gather over "x", 8192 bytes per device (sharded [{}, {"x"}], the dot groups on the other operand's non-contracting axes and first moves it to [{}, {}]) [implicit-reshard]}}
  %0 = stablehlo.dot_general %arg0, %arg1, contracting_dims = [1] x [0] {sdy.sharding = #sdy.sharding_per_value<[<@m, [{"x"}, {}]>]>} : (tensor<16x32xf32>, tensor<32x64xf32>) -> tensor<16x64xf32>
  return %0 : tensor<16x64xf32>
}

// -----

// An axis that moves between dimensions needs an all-to-all; a returned value
// sharded otherwise than its result is resharded too.
// CHECK-LABEL: func @implicit_all_to_all(
sdy.mesh @m = <["x"=4, "y"=2]>
func.func @implicit_all_to_all(%arg0: tensor<16x16xf32> {sdy.sharding = #sdy.sharding<@m, [{"x"}, {}]>},
                               %arg1: tensor<16x16xf32> {sdy.sharding = #sdy.sharding<@m, [{}, {"x"}]>}) -> (tensor<16x16xf32> {sdy.sharding = #sdy.sharding<@m, [{"y"}, {}]>}) {
  // expected-warning@+1 {{implicit reshard: operand 1 (tensor<16x16xf32>) needs an all-to-all over "x", 256 bytes per device (sharded [{}, {"x"}], the op needs [{"x"}, {}])}}
  %0 = stablehlo.add %arg0, %arg1 {sdy.sharding = #sdy.sharding_per_value<[<@m, [{"x"}, {}]>]>} : tensor<16x16xf32>
  // XLA first moves the shards to the devices of the new tiling (tiles change both
  // their x and their y coordinate), then gathers.
  // expected-warning@+2 {{implicit reshard: result 0 (tensor<16x16xf32>) needs a collective-permute over "x", "y", 256 bytes per device (returned [{"x"}, {}] as result 0, declared [{"y"}, {}])}}
  // expected-warning@+1 {{implicit reshard: result 0 (tensor<16x16xf32>) needs an all-gather over "x", 512 bytes per device (returned [{"x"}, {}] as result 0, declared [{"y"}, {}])}}
  return %0 : tensor<16x16xf32>
}

// -----

// Axes of equal size swapped: the same tiling on other devices, a collective-permute.
// CHECK-LABEL: func @implicit_collective_permute(
sdy.mesh @cube = <["a"=2, "b"=2, "c"=2]>
func.func @implicit_collective_permute(%arg0: tensor<16x16xf32> {sdy.sharding = #sdy.sharding<@cube, [{"a"}, {"b"}]>}) -> (tensor<16x16xf32> {sdy.sharding = #sdy.sharding<@cube, [{"b"}, {"a"}]>}) {
  // expected-warning@+1 {{implicit reshard: result 0 (tensor<16x16xf32>) needs a collective-permute over "a", "b", 256 bytes per device (returned [{"a"}, {"b"}] as result 0, declared [{"b"}, {"a"}])}}
  return %arg0 : tensor<16x16xf32>
}

// -----

// A sharded contraction needs an all-reduce: intended, so no warning.
// CHECK-LABEL: func @all_reduce_is_not_a_reshard(
sdy.mesh @m = <["x"=4, "y"=2]>
func.func @all_reduce_is_not_a_reshard(%arg0: tensor<16x32xf32> {sdy.sharding = #sdy.sharding<@m, [{}, {"x"}]>},
                                       %arg1: tensor<32x64xf32> {sdy.sharding = #sdy.sharding<@m, [{"x"}, {}]>}) -> (tensor<16x64xf32> {sdy.sharding = #sdy.sharding<@m, [{"y"}, {}]>}) {
  %0 = stablehlo.dot_general %arg0, %arg1, contracting_dims = [1] x [0] {sdy.sharding = #sdy.sharding_per_value<[<@m, [{"y"}, {}]>]>} : (tensor<16x32xf32>, tensor<32x64xf32>) -> tensor<16x64xf32>
  return %0 : tensor<16x64xf32>
}

// -----

// A large tensor left replicated (threshold 4096 bytes here), and an output
// replicated although the inputs are sharded.
// CHECK-LABEL: func @replicated(
sdy.mesh @m = <["x"=4, "y"=2]>
// expected-warning@+1 {{tensor<64x64xf32> (16384 bytes) is replicated on all 8 devices of @m [replicated-large-tensor]}}
func.func @replicated(%arg0: tensor<64x64xf32> {sdy.sharding = #sdy.sharding<@m, [{}, {}]>},
                      %arg1: tensor<8xf32> {sdy.sharding = #sdy.sharding<@m, [{"x"}]>},
                      %arg2: tensor<8x8xf32> {sdy.sharding = #sdy.sharding<@m, [{}, {}]>}) -> (tensor<64x64xf32> {sdy.sharding = #sdy.sharding<@m, [{}, {}]>}, tensor<8xf32> {sdy.sharding = #sdy.sharding<@m, [{"x"}]>}) {
  // expected-warning@+1 {{result 0 (tensor<64x64xf32>) is replicated although argument 1 is sharded: every device holds all 16384 bytes [replicated-output]}}
  return %arg0, %arg1 : tensor<64x64xf32>, tensor<8xf32>
}

// -----

// A manual computation result that does not use a manual axis.
// CHECK-LABEL: func @manual_axis_not_in_output(
sdy.mesh @m = <["x"=4, "y"=2]>
func.func @manual_axis_not_in_output(%arg0: tensor<8xf32> {sdy.sharding = #sdy.sharding<@m, [{"x"}]>}) -> (tensor<2xf32> {sdy.sharding = #sdy.sharding<@m, [{}]>}) {
  // expected-warning@+2 {{result 0 (tensor<2xf32>) is replicated although argument 0 is sharded}}
  // expected-warning@+1 {{result 0 is not sharded over manual axis "x": every device along it is assumed to hold the same value (reduce it first, e.g. with psum) [manual-axis-not-in-output]}}
  %0 = sdy.manual_computation(%arg0) in_shardings=[<@m, [{"x"}]>] out_shardings=[<@m, [{}]>] manual_axes={"x"} (%a: tensor<2xf32>) {
    sdy.return %a : tensor<2xf32>
  } : (tensor<8xf32>) -> tensor<2xf32>
  return %0 : tensor<2xf32>
}

// -----

// Values without a sharding are unknown, unless assume-replicated is set
// (see check_shardings_werror.mlir): no warning here.
// CHECK-LABEL: func @unknown_is_quiet(
sdy.mesh @m = <["x"=4, "y"=2]>
func.func @unknown_is_quiet(%arg0: tensor<16x16xf32> {sdy.sharding = #sdy.sharding<@m, [{"x"}, {}]>}) -> tensor<16x16xf32> {
  %0 = stablehlo.transpose %arg0, dims = [1, 0] : (tensor<16x16xf32>) -> tensor<16x16xf32>
  return %0 : tensor<16x16xf32>
}
