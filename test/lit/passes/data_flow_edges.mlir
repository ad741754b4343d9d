// RUN: shardc-opt %s -split-input-file -sdy-add-data-flow-edges -sdy-basic-propagate -sdy-sink-data-flow-edges | filecheck %s

// A manual computation: the free axis "a" flows in through the body-argument
// edge (manual axis "b" erased inside) and back out through the result edge.
// CHECK-LABEL: func @manual
// CHECK: sdy.manual_computation(%0) in_shardings=[<@mesh, [{"b", "a", ?}, {?}]>] out_shardings=[<@mesh, [{"b", "a", ?}, {?}]>] manual_axes={"b"}
// CHECK-NEXT: stablehlo.tanh %arg1 {sdy.sharding = #sdy.sharding_per_value<[<@mesh, [{"a", ?}, {?}]>]>}
sdy.mesh @mesh = <["a"=2, "b"=2]>
func.func @manual(%arg0: tensor<16x8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"b", "a"}, {}]>}) -> tensor<16x8xf32> {
  %0 = stablehlo.negate %arg0 : tensor<16x8xf32>
  %1 = sdy.manual_computation(%0) in_shardings=[<@mesh, [{"b", ?}, {?}]>] out_shardings=[<@mesh, [{"b", ?}, {?}]>] manual_axes={"b"} (%arg1: tensor<8x8xf32>) {
    %2 = stablehlo.tanh %arg1 : tensor<8x8xf32>
    sdy.return %2 : tensor<8x8xf32>
  } : (tensor<16x8xf32>) -> tensor<16x8xf32>
  return %1 : tensor<16x8xf32>
}
