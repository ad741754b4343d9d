// RUN: shardc-opt %s -split-input-file -shardc-capture-loop-invariants | filecheck %s

// A carry the body returns unchanged becomes a free variable of the loop; a free
// variable with a sharding is read inside the loop through a fully open constraint.
sdy.mesh @mesh = <["x"=2, "y"=4]>

// CHECK-LABEL: func @invariant_weight
// CHECK:      %[[W:.*]] = sdy.sharding_constraint %arg0 <@mesh, [{?}, {?}]>
// CHECK-NEXT: %[[L:.*]]:2 = stablehlo.while(%[[I:.*]] = %c, %[[H:.*]] = %arg1) : tensor<i32>, tensor<8x8xf32>
// CHECK:      stablehlo.dot %[[H]], %[[W]]
// CHECK:      stablehlo.return %{{.*}}, %{{.*}} : tensor<i32>, tensor<8x8xf32>
// CHECK:      return %arg0, %[[L]]#1
func.func @invariant_weight(%arg0: tensor<8x8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x"}, {"y"}]>}, %arg1: tensor<8x8xf32>) -> (tensor<8x8xf32>, tensor<8x8xf32>) {
  %c = stablehlo.constant dense<0> : tensor<i32>
  %0:3 = stablehlo.while(%i = %c, %w = %arg0, %h = %arg1) : tensor<i32>, tensor<8x8xf32>, tensor<8x8xf32>
  cond {
    %c3 = stablehlo.constant dense<3> : tensor<i32>
    %p = stablehlo.compare LT, %i, %c3, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
    stablehlo.return %p : tensor<i1>
  } do {
    %c1 = stablehlo.constant dense<1> : tensor<i32>
    %j = stablehlo.add %i, %c1 : tensor<i32>
    %y = stablehlo.dot %h, %w : (tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<8x8xf32>
    stablehlo.return %j, %w, %y : tensor<i32>, tensor<8x8xf32>, tensor<8x8xf32>
  }
  return %0#1, %0#2 : tensor<8x8xf32>, tensor<8x8xf32>
}

// -----

// A carry returned as the very value the loop was given is invariant too; the
// loop's own sharding keeps the entries of the other carries. Free variables
// without a sharding, or of rank 0, are read directly.
sdy.mesh @mesh = <["x"=2, "y"=4]>

// CHECK-LABEL: func @returned_operand
// CHECK-NOT:  sdy.sharding_constraint
// CHECK:      %[[L:.*]]:2 = stablehlo.while(%[[I:.*]] = %c, %[[H:.*]] = %arg1) : tensor<i32>, tensor<8xf32>
// CHECK-SAME:   sdy.sharding = #sdy.sharding_per_value<[<@mesh, []>, <@mesh, [{"y"}]>]>
// CHECK:      stablehlo.compare LT, %[[I]], %arg2
// CHECK:      stablehlo.add %[[H]], %arg0
// CHECK:      return %arg0, %[[L]]#1
func.func @returned_operand(%arg0: tensor<8xf32>, %arg1: tensor<8xf32>, %arg2: tensor<i32> {sdy.sharding = #sdy.sharding<@mesh, []>}) -> (tensor<8xf32>, tensor<8xf32>) {
  %c = stablehlo.constant dense<0> : tensor<i32>
  %0:4 = stablehlo.while(%i = %c, %w = %arg0, %h = %arg1, %n = %arg2) : tensor<i32>, tensor<8xf32>, tensor<8xf32>, tensor<i32>
    attributes {sdy.sharding = #sdy.sharding_per_value<[<@mesh, []>, <@mesh, [{"x"}]>, <@mesh, [{"y"}]>, <@mesh, []>]>}
  cond {
    %p = stablehlo.compare LT, %i, %n, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
    stablehlo.return %p : tensor<i1>
  } do {
    %c1 = stablehlo.constant dense<1> : tensor<i32>
    %j = stablehlo.add %i, %c1 : tensor<i32>
    %y = stablehlo.add %h, %w : tensor<8xf32>
    stablehlo.return %j, %arg0, %y, %n : tensor<i32>, tensor<8xf32>, tensor<8xf32>, tensor<i32>
  }
  return %0#1, %0#2 : tensor<8xf32>, tensor<8xf32>
}

// -----

// Nested loops: the inner loop is rewritten first; a sharded value read by the
// inner loop is opened before each loop, the inner constraint reading the outer.
sdy.mesh @mesh = <["x"=2, "y"=4]>

// CHECK-LABEL: func @nested
// CHECK:      %[[OUTER:.*]] = sdy.sharding_constraint %arg0 <@mesh, [{?}]>
// CHECK-NEXT: stablehlo.while(%[[I:.*]] = %c, %[[H:.*]] = %arg1)
// CHECK:      %[[INNER:.*]] = sdy.sharding_constraint %[[OUTER]] <@mesh, [{?}]>
// CHECK-NEXT: stablehlo.while(%[[K:.*]] = %c, %[[G:.*]] = %[[H]])
// CHECK:      stablehlo.add %[[G]], %[[INNER]]
func.func @nested(%arg0: tensor<8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x"}]>}, %arg1: tensor<8xf32>) -> tensor<8xf32> {
  %c = stablehlo.constant dense<0> : tensor<i32>
  %0:3 = stablehlo.while(%i = %c, %w = %arg0, %h = %arg1) : tensor<i32>, tensor<8xf32>, tensor<8xf32>
  cond {
    %c3 = stablehlo.constant dense<3> : tensor<i32>
    %p = stablehlo.compare LT, %i, %c3, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
    stablehlo.return %p : tensor<i1>
  } do {
    %1:3 = stablehlo.while(%k = %c, %v = %w, %g = %h) : tensor<i32>, tensor<8xf32>, tensor<8xf32>
    cond {
      %c2 = stablehlo.constant dense<2> : tensor<i32>
      %q = stablehlo.compare LT, %k, %c2, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      stablehlo.return %q : tensor<i1>
    } do {
      %c1 = stablehlo.constant dense<1> : tensor<i32>
      %k1 = stablehlo.add %k, %c1 : tensor<i32>
      %g1 = stablehlo.add %g, %v : tensor<8xf32>
      stablehlo.return %k1, %v, %g1 : tensor<i32>, tensor<8xf32>, tensor<8xf32>
    }
    %c1 = stablehlo.constant dense<1> : tensor<i32>
    %j = stablehlo.add %i, %c1 : tensor<i32>
    stablehlo.return %j, %w, %1#2 : tensor<i32>, tensor<8xf32>, tensor<8xf32>
  }
  return %0#2 : tensor<8xf32>
}
