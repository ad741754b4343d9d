// Shrunk by test/python/test_property_pipeline.py (property (a)) from
//   Program(mesh_shape=(2, 1, 4), arg_shapes=((1, 1), (1,)), arg_specs=(None, None),
//           steps=(Step('unary', (0,), ('negate',)), Step('constraint', (0,), (P('y',),))),
//           outputs=(2,), out_specs=(P(None, 'y'),), data_seed=0), strategy='aggressive'
// and reduced by hand. A size-1 axis "y" reaches %arg0 twice: dim 1 from the
// result through the negate, dim 0 from the sharding constraint's operand.
// Shardy (sdy-*-propagate) keeps only dim 1: [{?}, {"y", ?}]. shardc wrote
// [{"y", ?}, {"y", ?}], which the verifier rejects ("duplicate axis ref"),
// because a size-1 axis spans an empty interval in axes.overlaps.
// With a size-2 "y" shardc agrees with Shardy.
// Fixed: axes.overlaps now treats a full axis as overlapping any ref of it.
// RUN: shardc-opt %s -shardc-basic-propagate | filecheck %s
// RUN: shardc-opt %s -shardc-aggressive-propagate | filecheck %s
// RUN: shardc-opt %s -shardc-op-priority-propagate | filecheck %s
// RUN: shardc-opt %s -shardc-user-priority-propagate | filecheck %s

// CHECK: sdy.mesh @mesh = <["y"=1]>
// CHECK-LABEL: func.func public @main
// CHECK-SAME: (%arg0: tensor<1x1xf32> {sdy.sharding = #sdy.sharding<@mesh, [{?}, {"y", ?}]>})
// CHECK-NEXT: stablehlo.negate %arg0 {sdy.sharding = #sdy.sharding_per_value<[<@mesh, [{?}, {"y", ?}]>]>}
sdy.mesh @mesh = <["y"=1]>
func.func public @main(%arg0: tensor<1x1xf32>) -> (tensor<1x1xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {"y"}]>}) {
  %0 = stablehlo.negate %arg0 : tensor<1x1xf32>
  %1 = sdy.sharding_constraint %arg0 <@mesh, [{"y"}, {}]> : tensor<1x1xf32>
  return %0 : tensor<1x1xf32>
}
