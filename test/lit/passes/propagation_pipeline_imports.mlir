// Import steps of the propagation pipeline.
// RUN: shardc-opt %s -split-input-file -sdy-propagation-pipeline | filecheck %s

// The import step drops size-one axes ("z"=1) from every sharding.
// CHECK: sdy.mesh @mesh = <["a"=4, "z"=1]> {stablehlo.mesh = {axes = [{name = "a", size = 4 : i64}, {name = "z", size = 1 : i64}]}}
// CHECK-NEXT: func.func @main(%arg0: tensor<8x4xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"a"}, {}]>}) -> (tensor<8x4xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"a"}, {}]>}) {
// CHECK-NEXT: %0 = stablehlo.negate %arg0 {sdy.sharding = #sdy.sharding_per_value<[<@mesh, [{"a"}, {}]>]>} : tensor<8x4xf32>
// CHECK-NEXT: return %0 : tensor<8x4xf32>
sdy.mesh @mesh = <["a"=4, "z"=1]>
func.func @main(%arg0: tensor<8x4xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"a"}, {"z"}]>}) -> tensor<8x4xf32> {
  %0 = stablehlo.negate %arg0 : tensor<8x4xf32>
  return %0 : tensor<8x4xf32>
}

// -----

// Calls are inlined before propagation (a documented difference: Shardy keeps
// the call as a named computation and exports it back to a call; the
// shardings are the same).
// CHECK: sdy.mesh @mesh = <["a"=2, "b"=2]> {stablehlo.mesh = {axes = [{name = "a", size = 2 : i64}, {name = "b", size = 2 : i64}]}}
// CHECK-NEXT: func.func @main(%arg0: tensor<8x4xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"a"}, {}]>}) -> (tensor<8x4xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"a"}, {}]>}) {
// CHECK-NEXT: %0 = stablehlo.negate %arg0 {sdy.sharding = #sdy.sharding_per_value<[<@mesh, [{"a"}, {}]>]>} : tensor<8x4xf32>
// CHECK-NEXT: return %0 : tensor<8x4xf32>
sdy.mesh @mesh = <["a"=2, "b"=2]>
func.func @main(%arg0: tensor<8x4xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"a"}, {}]>}) -> tensor<8x4xf32> {
  %0 = func.call @helper(%arg0) : (tensor<8x4xf32>) -> tensor<8x4xf32>
  return %0 : tensor<8x4xf32>
}
func.func private @helper(%arg0: tensor<8x4xf32>) -> tensor<8x4xf32> {
  %0 = stablehlo.negate %arg0 : tensor<8x4xf32>
  return %0 : tensor<8x4xf32>
}

// -----

// A closed constraint gives its sharding to an unsharded op result even when the
// op has regions (a scatter), so it wins over the sharded updates operand.
// CHECK-LABEL: func @constraint_on_scatter(
// CHECK:       "stablehlo.scatter"
// CHECK:       sdy.sharding = #sdy.sharding_per_value<[<@mesh, [{}, {}]>]>
sdy.mesh @mesh = <["x"=8]>
func.func @constraint_on_scatter(%arg0: tensor<2x8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {}]>}, %arg1: tensor<8x1xi32>, %arg2: tensor<8x8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {"x"}]>}) -> (tensor<2x8xf32>, tensor<2x8xf32>) {
  %0 = "stablehlo.scatter"(%arg0, %arg1, %arg2) <{indices_are_sorted = false, scatter_dimension_numbers = #stablehlo.scatter<update_window_dims = [1], inserted_window_dims = [0], scatter_dims_to_operand_dims = [0], index_vector_dim = 1>, unique_indices = false}> ({
  ^bb0(%a: tensor<f32>, %b: tensor<f32>):
    %s = stablehlo.add %a, %b : tensor<f32>
    stablehlo.return %s : tensor<f32>
  }) : (tensor<2x8xf32>, tensor<8x1xi32>, tensor<8x8xf32>) -> tensor<2x8xf32>
  %1 = sdy.manual_computation(%0) in_shardings=[<@mesh, [{}, {}]>] out_shardings=[<@mesh, [{}, {}]>] manual_axes={"x"} (%arg3: tensor<2x8xf32>) {
    sdy.return %arg3 : tensor<2x8xf32>
  } : (tensor<2x8xf32>) -> tensor<2x8xf32>
  return %0, %1 : tensor<2x8xf32>, tensor<2x8xf32>
}

// -----

// On a data-flow edge's value (a while result) the constraint moves right after
// the edge and takes over its other uses: the loop keeps its own sharding.
// CHECK-LABEL: func @constraint_on_while_result(
// CHECK-SAME:  -> (tensor<8x8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {"y"}]>}, tensor<8x8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {"y"}]>})
// CHECK:       stablehlo.while{{.*}}sdy.sharding = #sdy.sharding_per_value<[<@mesh, []>, <@mesh, [{"x"}, {"y"}]>]>
// CHECK:       %[[C:.*]] = sdy.reshard %{{.*}}#1 <@mesh, [{}, {"y"}]>
// CHECK:       stablehlo.negate %[[C]] {sdy.sharding = #sdy.sharding_per_value<[<@mesh, [{}, {"y"}]>]>}
sdy.mesh @mesh = <["x"=4, "y"=2]>
func.func @constraint_on_while_result(%arg0: tensor<8x8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x"}, {}]>}) -> (tensor<8x8xf32>, tensor<8x8xf32>) {
  %c = stablehlo.constant dense<0> : tensor<i32>
  %0:2 = stablehlo.while(%i = %c, %x = %arg0) : tensor<i32>, tensor<8x8xf32>
  cond {
    %c3 = stablehlo.constant dense<3> : tensor<i32>
    %p = stablehlo.compare LT, %i, %c3, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
    stablehlo.return %p : tensor<i1>
  } do {
    %c1 = stablehlo.constant dense<1> : tensor<i32>
    %j = stablehlo.add %i, %c1 : tensor<i32>
    %y = stablehlo.tanh %x : tensor<8x8xf32>
    stablehlo.return %j, %y : tensor<i32>, tensor<8x8xf32>
  }
  %1 = sdy.sharding_constraint %0#1 <@mesh, [{}, {"y"}]> : tensor<8x8xf32>
  %2 = stablehlo.negate %0#1 : tensor<8x8xf32>
  %3 = sdy.manual_computation(%0#1) in_shardings=[<@mesh, [{}, {"y"}]>] out_shardings=[<@mesh, [{}, {"y"}]>] manual_axes={"y"} (%a: tensor<8x4xf32>) {
    sdy.return %a : tensor<8x4xf32>
  } : (tensor<8x8xf32>) -> tensor<8x8xf32>
  %4 = stablehlo.add %1, %2 : tensor<8x8xf32>
  return %4, %3 : tensor<8x8xf32>, tensor<8x8xf32>
}

// -----

// A manual computation's result already has a sharding (its out-sharding, on the
// data-flow edge): the next manual computation's in-sharding is not applied to it,
// so the first result is returned as the first computation made it.
// CHECK-LABEL: func @chained_manual_computations(
// CHECK-SAME:  -> (tensor<8x4xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x"}, {}]>}, tensor<8x4xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"y"}, {}]>})
sdy.mesh @mesh = <["x"=4, "y"=2]>
func.func @chained_manual_computations(%arg0: tensor<8x4xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x"}, {}]>}) -> (tensor<8x4xf32>, tensor<8x4xf32>) {
  %0 = sdy.manual_computation(%arg0) in_shardings=[<@mesh, [{"x"}, {}]>] out_shardings=[<@mesh, [{"x"}, {}]>] manual_axes={"x", "y"} (%arg1: tensor<2x4xf32>) {
    %2 = stablehlo.tanh %arg1 : tensor<2x4xf32>
    sdy.return %2 : tensor<2x4xf32>
  } : (tensor<8x4xf32>) -> tensor<8x4xf32>
  %1 = sdy.manual_computation(%0) in_shardings=[<@mesh, [{"y"}, {}]>] out_shardings=[<@mesh, [{"y"}, {}]>] manual_axes={"x", "y"} (%arg1: tensor<4x4xf32>) {
    sdy.return %arg1 : tensor<4x4xf32>
  } : (tensor<8x4xf32>) -> tensor<8x4xf32>
  return %0, %1 : tensor<8x4xf32>, tensor<8x4xf32>
}

// -----

// A constant is an op like any other: a closed constraint on it gives it its
// sharding (inside a while body too); the constraint ends as a reshard.
// CHECK-LABEL: func @constraint_on_constant(
// CHECK:       stablehlo.while
// CHECK:       %[[C:.*]] = sdy.constant {sdy.sharding = #sdy.sharding_per_value<[<@mesh, []>]>} dense<1> : tensor<i32>
// CHECK-NEXT:  sdy.reshard %[[C]] <@mesh, []>
sdy.mesh @mesh = <["x"=4]>
func.func @constraint_on_constant(%arg0: tensor<i32>) -> tensor<i32> {
  %0 = stablehlo.while(%iterArg = %arg0) : tensor<i32>
  cond {
    %c = stablehlo.constant dense<3> : tensor<i32>
    %1 = stablehlo.compare LT, %iterArg, %c, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
    stablehlo.return %1 : tensor<i1>
  } do {
    %c = stablehlo.constant dense<1> : tensor<i32>
    %1 = sdy.sharding_constraint %c <@mesh, []> : tensor<i32>
    %2 = stablehlo.add %iterArg, %1 : tensor<i32>
    stablehlo.return %2 : tensor<i32>
  }
  return %0 : tensor<i32>
}

// -----

// A closed constraint on a loop's value (here its block argument and its result)
// moves after the data-flow edge instead of sharding the value, but its unreduced
// axes, which propagation never moves, go on the edge itself: the loop carries
// the value unreduced rather than reduced at every iteration.
// CHECK-LABEL: func.func @unreduced_loop_carry
// CHECK: stablehlo.while
// CHECK-SAME: sdy.sharding = #sdy.sharding_per_value<[<@mesh, []>, <@mesh, [{}, {}], unreduced={"x"}>]>
sdy.mesh @mesh = <["x"=2]>
func.func @unreduced_loop_carry(%arg0: tensor<4x4xf32>) -> tensor<4x4xf32> {
  %c = stablehlo.constant dense<0> : tensor<i32>
  %0:2 = stablehlo.while(%i = %c, %h = %arg0) : tensor<i32>, tensor<4x4xf32>
  cond {
    %c3 = stablehlo.constant dense<3> : tensor<i32>
    %p = stablehlo.compare LT, %i, %c3, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
    stablehlo.return %p : tensor<i1>
  } do {
    %h1 = sdy.sharding_constraint %h <@mesh, [{}, {}], unreduced={"x"}> : tensor<4x4xf32>
    %c1 = stablehlo.constant dense<1> : tensor<i32>
    %j = stablehlo.add %i, %c1 : tensor<i32>
    %y = stablehlo.add %h1, %h1 : tensor<4x4xf32>
    stablehlo.return %j, %y : tensor<i32>, tensor<4x4xf32>
  }
  %1 = sdy.sharding_constraint %0#1 <@mesh, [{}, {}], unreduced={"x"}> : tensor<4x4xf32>
  %2 = sdy.sharding_constraint %1 <@mesh, [{}, {}]> : tensor<4x4xf32>
  return %2 : tensor<4x4xf32>
}
