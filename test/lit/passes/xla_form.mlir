// RUN: shardc-opt %s -split-input-file -shardc-xla-form | filecheck %s

// XLA's conversion folds `%k + 0` to `%k` and then drops the carry from the
// loop, keeping the loop's sharding as it was ("has 2 leaf nodes while this
// sharding has 3", or an abort). The form shardc hands XLA keeps no per-carry
// sharding on a loop: XLA's data-flow edges re-derive the carries, as they do
// for jax's own module (constraints saying the same would reorder XLA's
// propagation around the loop). A carry the body returns unchanged (%w) is
// read from above, and a free variable (%arg1) stays free.
sdy.mesh @mesh = <["x"=4, "y"=2]>

// CHECK-LABEL: func @loop_with_foldable_and_pass_through_carries
// CHECK-NOT:  sdy.sharding_constraint
// CHECK:      %[[L:.*]]:3 = stablehlo.while(%[[I:.*]] = %c, %[[A:.*]] = %arg0, %[[K:.*]] = %c) : tensor<i32>, tensor<16x8xf32>, tensor<i32>{{$}}
// CHECK-NOT:  sdy.sharding_per_value
// CHECK:      } do {
// CHECK:        %[[K1:.*]] = stablehlo.add %[[K]], %{{.*}}
// CHECK:        %[[D:.*]] = stablehlo.dot %[[A]], %arg1
// CHECK:        %[[Y:.*]] = stablehlo.add %[[D]], %arg2
// CHECK:        stablehlo.return %{{.*}}, %[[Y]], %[[K1]] : tensor<i32>, tensor<16x8xf32>, tensor<i32>
// CHECK:      }
// CHECK-NOT:  sdy.sharding_constraint
// CHECK:      return %[[L]]#1, %arg2
func.func @loop_with_foldable_and_pass_through_carries(
    %arg0: tensor<16x8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x"}, {"y"}]>},
    %arg1: tensor<8x8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {"y"}]>},
    %arg2: tensor<16x8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x"}, {}]>})
    -> (tensor<16x8xf32>, tensor<16x8xf32>) {
  %c = stablehlo.constant dense<0> : tensor<i32>
  %0:4 = stablehlo.while(%i = %c, %a = %arg0, %k = %c, %w = %arg2) : tensor<i32>, tensor<16x8xf32>, tensor<i32>, tensor<16x8xf32>
    attributes {sdy.sharding = #sdy.sharding_per_value<[<@mesh, []>, <@mesh, [{"x"}, {}]>, <@mesh, []>, <@mesh, [{"x"}, {}]>]>}
  cond {
    %c4 = stablehlo.constant dense<4> : tensor<i32>
    %p = stablehlo.compare LT, %i, %c4 : (tensor<i32>, tensor<i32>) -> tensor<i1>
    stablehlo.return %p : tensor<i1>
  } do {
    %c1 = stablehlo.constant dense<1> : tensor<i32>
    %z = stablehlo.constant dense<0> : tensor<i32>
    %i1 = stablehlo.add %i, %c1 : tensor<i32>
    %k1 = stablehlo.add %k, %z : tensor<i32>
    %d = stablehlo.dot %a, %arg1 {sdy.sharding = #sdy.sharding_per_value<[<@mesh, [{"x"}, {}]>]>} : (tensor<16x8xf32>, tensor<8x8xf32>) -> tensor<16x8xf32>
    %y = stablehlo.add %d, %w {sdy.sharding = #sdy.sharding_per_value<[<@mesh, [{"x"}, {}]>]>} : tensor<16x8xf32>
    stablehlo.return %i1, %y, %k1, %w : tensor<i32>, tensor<16x8xf32>, tensor<i32>, tensor<16x8xf32>
  }
  return %0#1, %0#3 : tensor<16x8xf32>, tensor<16x8xf32>
}

// -----

// An op reading a loop's result loses its sharding: XLA's conversion folds it
// when it is an identity (`r + 0`) and would move its one sharding onto the
// loop, sharding every carry alike (a scalar's rank then fails its check).
sdy.mesh @mesh = <["x"=4, "y"=2]>

// CHECK-LABEL: func @loop_result_read_by_an_identity
// CHECK:      %[[L:.*]]:2 = stablehlo.while
// CHECK:      %[[R:.*]] = stablehlo.add %[[L]]#1, %{{.*}} : tensor<16x8xf32>
// CHECK-NEXT: return %[[R]]
func.func @loop_result_read_by_an_identity(
    %arg0: tensor<16x8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x"}, {}]>})
    -> tensor<16x8xf32> {
  %c = stablehlo.constant dense<0> : tensor<i32>
  %zeros = stablehlo.constant dense<0.0> : tensor<16x8xf32>
  %0:2 = stablehlo.while(%i = %c, %a = %arg0) : tensor<i32>, tensor<16x8xf32>
    attributes {sdy.sharding = #sdy.sharding_per_value<[<@mesh, []>, <@mesh, [{"x"}, {}]>]>}
  cond {
    %c4 = stablehlo.constant dense<4> : tensor<i32>
    %p = stablehlo.compare LT, %i, %c4 : (tensor<i32>, tensor<i32>) -> tensor<i1>
    stablehlo.return %p : tensor<i1>
  } do {
    %c1 = stablehlo.constant dense<1> : tensor<i32>
    %i1 = stablehlo.add %i, %c1 : tensor<i32>
    %t = stablehlo.tanh %a {sdy.sharding = #sdy.sharding_per_value<[<@mesh, [{"x"}, {}]>]>} : tensor<16x8xf32>
    stablehlo.return %i1, %t : tensor<i32>, tensor<16x8xf32>
  }
  %r = stablehlo.add %0#1, %zeros {sdy.sharding = #sdy.sharding_per_value<[<@mesh, [{"x"}, {}]>]>} : tensor<16x8xf32>
  return %r : tensor<16x8xf32>
}

// -----

// Folds chain: `(r + 0) + 0` folds into the loop's result too, so every reader
// of a reader of the same type loses its sharding as well; a reader of another
// type cannot fold into the result, and what reads it keeps its sharding.
sdy.mesh @mesh = <["x"=4, "y"=2]>

// CHECK-LABEL: func @loop_result_read_by_a_chain_of_identities
// CHECK:      %[[L:.*]]:2 = stablehlo.while
// CHECK:      %[[R:.*]] = stablehlo.add %[[L]]#1, %{{.*}} : tensor<16x8xf32>
// CHECK-NEXT: %[[S:.*]] = stablehlo.add %[[R]], %{{.*}} : tensor<16x8xf32>
// CHECK-NEXT: %[[M:.*]] = stablehlo.reduce(%[[S]] init: {{.*}} -> tensor<16xf32>{{$}}
// CHECK-NEXT: stablehlo.negate %[[M]] {sdy.sharding
func.func @loop_result_read_by_a_chain_of_identities(
    %arg0: tensor<16x8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x"}, {}]>})
    -> (tensor<16x8xf32>, tensor<16xf32>) {
  %c = stablehlo.constant dense<0> : tensor<i32>
  %f0 = stablehlo.constant dense<0.0> : tensor<f32>
  %zeros = stablehlo.constant dense<0.0> : tensor<16x8xf32>
  %0:2 = stablehlo.while(%i = %c, %a = %arg0) : tensor<i32>, tensor<16x8xf32>
    attributes {sdy.sharding = #sdy.sharding_per_value<[<@mesh, []>, <@mesh, [{"x"}, {}]>]>}
  cond {
    %c4 = stablehlo.constant dense<4> : tensor<i32>
    %p = stablehlo.compare LT, %i, %c4 : (tensor<i32>, tensor<i32>) -> tensor<i1>
    stablehlo.return %p : tensor<i1>
  } do {
    %c1 = stablehlo.constant dense<1> : tensor<i32>
    %i1 = stablehlo.add %i, %c1 : tensor<i32>
    %t = stablehlo.tanh %a {sdy.sharding = #sdy.sharding_per_value<[<@mesh, [{"x"}, {}]>]>} : tensor<16x8xf32>
    stablehlo.return %i1, %t : tensor<i32>, tensor<16x8xf32>
  }
  %r = stablehlo.add %0#1, %zeros {sdy.sharding = #sdy.sharding_per_value<[<@mesh, [{"x"}, {}]>]>} : tensor<16x8xf32>
  %s = stablehlo.add %r, %zeros {sdy.sharding = #sdy.sharding_per_value<[<@mesh, [{"x"}, {}]>]>} : tensor<16x8xf32>
  %m = stablehlo.reduce(%s init: %f0) applies stablehlo.add across dimensions = [1] {sdy.sharding = #sdy.sharding_per_value<[<@mesh, [{"x"}]>]>} : (tensor<16x8xf32>, tensor<f32>) -> tensor<16xf32>
  %n = stablehlo.negate %m {sdy.sharding = #sdy.sharding_per_value<[<@mesh, [{"x"}]>]>} : tensor<16xf32>
  return %s, %n : tensor<16x8xf32>, tensor<16xf32>
}

// -----

// Where XLA must partition the op shardings as written (the cost-aware route's
// choices, marked `shardc.keep_op_shardings`), closed constraints around the
// loop say each carry's sharding instead, and survive whatever carries XLA
// drops (a replicated scalar needs none).

// CHECK-LABEL: func @kept_loop_with_foldable_and_pass_through_carries
// CHECK:      %[[X:.*]] = sdy.sharding_constraint %arg0 <@mesh, [{"x"}, {"y"}]>
// CHECK-NEXT: %[[X2:.*]] = sdy.sharding_constraint %[[X]] <@mesh, [{"x"}, {}]>
// CHECK-NEXT: %[[L:.*]]:3 = stablehlo.while(%[[I:.*]] = %c, %[[A:.*]] = %[[X2]], %[[K:.*]] = %c) : tensor<i32>, tensor<16x8xf32>, tensor<i32>{{$}}
// CHECK:      } do {
// CHECK-NEXT:   %[[BA:.*]] = sdy.sharding_constraint %[[A]] <@mesh, [{"x"}, {}]>
// CHECK:        %[[K1:.*]] = stablehlo.add %[[K]], %{{.*}}
// CHECK:        %[[D:.*]] = stablehlo.dot %[[BA]], %arg1
// CHECK:        %[[Y:.*]] = stablehlo.add %[[D]], %arg2
// CHECK-NEXT:   %[[YC:.*]] = sdy.sharding_constraint %[[Y]] <@mesh, [{"x"}, {}]>
// CHECK-NEXT:   stablehlo.return %{{.*}}, %[[YC]], %[[K1]] : tensor<i32>, tensor<16x8xf32>, tensor<i32>
// CHECK:      }
// CHECK-NEXT: %[[R:.*]] = sdy.sharding_constraint %[[L]]#1 <@mesh, [{"x"}, {}]>
// CHECK-NEXT: return %[[R]], %arg2
module attributes {shardc.keep_op_shardings} {
sdy.mesh @mesh = <["x"=4, "y"=2]>
func.func @kept_loop_with_foldable_and_pass_through_carries(
    %arg0: tensor<16x8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x"}, {"y"}]>},
    %arg1: tensor<8x8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {"y"}]>},
    %arg2: tensor<16x8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x"}, {}]>})
    -> (tensor<16x8xf32>, tensor<16x8xf32>) {
  %c = stablehlo.constant dense<0> : tensor<i32>
  %0:4 = stablehlo.while(%i = %c, %a = %arg0, %k = %c, %w = %arg2) : tensor<i32>, tensor<16x8xf32>, tensor<i32>, tensor<16x8xf32>
    attributes {sdy.sharding = #sdy.sharding_per_value<[<@mesh, []>, <@mesh, [{"x"}, {}]>, <@mesh, []>, <@mesh, [{"x"}, {}]>]>}
  cond {
    %c4 = stablehlo.constant dense<4> : tensor<i32>
    %p = stablehlo.compare LT, %i, %c4 : (tensor<i32>, tensor<i32>) -> tensor<i1>
    stablehlo.return %p : tensor<i1>
  } do {
    %c1 = stablehlo.constant dense<1> : tensor<i32>
    %z = stablehlo.constant dense<0> : tensor<i32>
    %i1 = stablehlo.add %i, %c1 : tensor<i32>
    %k1 = stablehlo.add %k, %z : tensor<i32>
    %d = stablehlo.dot %a, %arg1 : (tensor<16x8xf32>, tensor<8x8xf32>) -> tensor<16x8xf32>
    %y = stablehlo.add %d, %w : tensor<16x8xf32>
    stablehlo.return %i1, %y, %k1, %w : tensor<i32>, tensor<16x8xf32>, tensor<i32>, tensor<16x8xf32>
  }
  return %0#1, %0#3 : tensor<16x8xf32>, tensor<16x8xf32>
}
}

// -----

// A case keeps its per-result sharding (XLA checks that its branches agree);
// a free variable one branch ignores stays as it is.
sdy.mesh @mesh = <["x"=4, "y"=2]>

// CHECK-LABEL: func @case_with_free_variables
// CHECK:      %[[C:.*]] = "stablehlo.case"(%arg0)
// CHECK:      }) {sdy.sharding = #sdy.sharding_per_value<[<@mesh, [{"x"}, {}]>]>}
// CHECK-NEXT: return %[[C]]
func.func @case_with_free_variables(
    %arg0: tensor<i32>,
    %arg1: tensor<16x8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x"}, {}]>},
    %arg2: tensor<8x8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {"y"}]>})
    -> tensor<16x8xf32> {
  %0 = "stablehlo.case"(%arg0) ({
    %d = stablehlo.dot %arg1, %arg2 {sdy.sharding = #sdy.sharding_per_value<[<@mesh, [{"x"}, {}]>]>} : (tensor<16x8xf32>, tensor<8x8xf32>) -> tensor<16x8xf32>
    stablehlo.return %d : tensor<16x8xf32>
  }, {
    stablehlo.return %arg1 : tensor<16x8xf32>
  }) {sdy.sharding = #sdy.sharding_per_value<[<@mesh, [{"x"}, {}]>]>} : (tensor<i32>) -> tensor<16x8xf32>
  return %0 : tensor<16x8xf32>
}

// -----

// jax.checkpoint's optimization_barrier: XLA's conversion folds `x - 0` into
// the barrier's result and moves the subtraction's one sharding onto the
// barrier, every result then sharded alike (a scalar among them fails). Where
// the results differ in rank, the form drops the barrier's sharding and those
// of the ops that could fold into a result, for XLA to re-derive: constraints
// would be extra seeds of its propagation.
sdy.mesh @mesh = <["x"=4, "y"=2]>

// CHECK-LABEL: func @barrier_of_differently_sharded_values
// CHECK:      %[[B:.*]]:2 = stablehlo.optimization_barrier %arg0, %arg1 : tensor<16x8xf32>, tensor<f32>{{$}}
// CHECK-NOT:  sdy.sharding_constraint
// CHECK:      stablehlo.subtract %[[B]]#0, %{{.*}} : tensor<16x8xf32>{{$}}
// CHECK:      return {{.*}}, %[[B]]#1
func.func @barrier_of_differently_sharded_values(
    %arg0: tensor<16x8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x"}, {"y"}]>},
    %arg1: tensor<f32>) -> (tensor<16x8xf32>, tensor<f32>) {
  %b:2 = stablehlo.optimization_barrier {sdy.sharding = #sdy.sharding_per_value<[<@mesh, [{"x"}, {"y"}]>, <@mesh, []>]>} %arg0, %arg1 : tensor<16x8xf32>, tensor<f32>
  %z = stablehlo.constant dense<0.000000e+00> : tensor<16x8xf32>
  %d = stablehlo.subtract %b#0, %z {sdy.sharding = #sdy.sharding_per_value<[<@mesh, [{"x"}, {"y"}]>]>} : tensor<16x8xf32>
  return %d, %b#1 : tensor<16x8xf32>, tensor<f32>
}

// -----

// Where XLA must partition the op shardings as written, each result of such a
// barrier whose operand is sharded is followed by a constraint to that sharding
// instead, so a moved sharding lands on one value.

// CHECK-LABEL: func @kept_barrier_of_differently_sharded_values
// CHECK:      %[[B:.*]]:2 = stablehlo.optimization_barrier %arg0, %arg1 : tensor<16x8xf32>, tensor<f32>{{$}}
// CHECK-NEXT: %[[H:.*]] = sdy.sharding_constraint %[[B]]#0 <@mesh, [{"x"}, {"y"}]>
// CHECK:      stablehlo.subtract %[[H]], %{{.*}}
// CHECK:      return {{.*}}, %[[B]]#1
module attributes {shardc.keep_op_shardings} {
sdy.mesh @mesh = <["x"=4, "y"=2]>
func.func @kept_barrier_of_differently_sharded_values(
    %arg0: tensor<16x8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x"}, {"y"}]>},
    %arg1: tensor<f32>) -> (tensor<16x8xf32>, tensor<f32>) {
  %b:2 = stablehlo.optimization_barrier {sdy.sharding = #sdy.sharding_per_value<[<@mesh, [{"x"}, {"y"}]>, <@mesh, []>]>} %arg0, %arg1 : tensor<16x8xf32>, tensor<f32>
  %z = stablehlo.constant dense<0.000000e+00> : tensor<16x8xf32>
  %d = stablehlo.subtract %b#0, %z {sdy.sharding = #sdy.sharding_per_value<[<@mesh, [{"x"}, {"y"}]>]>} : tensor<16x8xf32>
  return %d, %b#1 : tensor<16x8xf32>, tensor<f32>
}
}

// -----

// A use of a result of a case with several results reads it through a
// constraint to the case's sharding of it: XLA's conversion folds an identity
// of the result (`zeros + r`) into it and moved the add's one sharding onto the
// case, all its results then sharded alike (the scalar's sharding fails).
sdy.mesh @mesh = <["x"=4, "y"=2]>

// CHECK-LABEL: func @case_results_read_through_constraints
// CHECK:      %[[C:.*]]:2 = "stablehlo.case"(%arg0)
// CHECK:      }) {sdy.sharding = #sdy.sharding_per_value<[<@mesh, [{"x"}]>, <@mesh, []>]>}
// CHECK-NEXT: %[[R:.*]] = sdy.sharding_constraint %[[C]]#0 <@mesh, [{"x"}]>
// CHECK:      stablehlo.add %{{.*}}, %[[R]]
// CHECK:      return {{.*}}, %[[C]]#1
func.func @case_results_read_through_constraints(
    %arg0: tensor<i32>,
    %arg1: tensor<16xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x"}]>},
    %arg2: tensor<f32>) -> (tensor<16xf32>, tensor<f32>) {
  %0:2 = "stablehlo.case"(%arg0) ({
    stablehlo.return %arg1, %arg2 : tensor<16xf32>, tensor<f32>
  }, {
    %n = stablehlo.negate %arg1 {sdy.sharding = #sdy.sharding_per_value<[<@mesh, [{"x"}]>]>} : tensor<16xf32>
    stablehlo.return %n, %arg2 : tensor<16xf32>, tensor<f32>
  }) {sdy.sharding = #sdy.sharding_per_value<[<@mesh, [{"x"}]>, <@mesh, []>]>} : (tensor<i32>) -> (tensor<16xf32>, tensor<f32>)
  %z = stablehlo.constant dense<0.0> : tensor<16xf32>
  %1 = stablehlo.add %z, %0#0 {sdy.sharding = #sdy.sharding_per_value<[<@mesh, [{"x"}]>]>} : tensor<16xf32>
  return %1, %0#1 : tensor<16xf32>, tensor<f32>
}
