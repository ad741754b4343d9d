// RUN: shardc-opt %s -shardc-populate-op-sharding-rules | filecheck %s
// RUN: shardc-opt %s -sdy-populate-op-sharding-rules | filecheck %s

// CHECK-LABEL: func @dynamic(
// CHECK: stablehlo.constant dense<0> : tensor<i32>{{$}}
// CHECK: stablehlo.dynamic_slice{{.*}}{sdy.sharding_rule = #sdy.op_sharding_rule<([i, j], [], [])->([i, j]) {i=8, j=4} need_replication={j} blocked_propagation={j}>}
// CHECK: stablehlo.dynamic_update_slice{{.*}}{sdy.sharding_rule = #sdy.op_sharding_rule<([i, j], [i, k], [], [])->([i, j]) {i=8, j=4, k=2} need_replication={k}>}
// CHECK: stablehlo.dynamic_update_slice{{.*}}{sdy.sharding_rule = #sdy.op_sharding_rule<([i, j], [i, k], [], [])->([i, j]) {i=8, j=4, k=2}>}
// CHECK-LABEL: func @gather(
// CHECK: stablehlo.gather{{.*}}{sdy.sharding_rule = #sdy.op_sharding_rule<([k, j], [i, l])->([i, j]) {i=6, j=4, k=8, l=1} reduction={k} need_replication={l}>}
// CHECK-LABEL: func @scatter(
// CHECK: stablehlo.add{{.*}}{sdy.sharding_rule = #sdy.op_sharding_rule<([], [])->([])>}
// CHECK: stablehlo.add{{.*}}{sdy.sharding_rule = #sdy.op_sharding_rule<([], [])->([])>}
// CHECK: {sdy.sharding_rule = #sdy.op_sharding_rule<([k, j], [k, j], [i, l], [i, j], [i, j])->([k, j], [k, j]) {i=6, j=4, k=8, l=1} reduction={i} need_replication={l}>}

// dynamic_slice: sliced dims are nr and blocked; dynamic_update_slice: update-only factor.
func.func @dynamic(%arg0: tensor<8x4xf32>, %arg1: tensor<i32>, %arg2: tensor<8x2xf32>) -> (tensor<8x2xf32>, tensor<8x4xf32>, tensor<8x4xf32>) {
  %c = stablehlo.constant dense<0> : tensor<i32>
  %0 = stablehlo.dynamic_slice %arg0, %arg1, %arg1, sizes = [8, 2] : (tensor<8x4xf32>, tensor<i32>, tensor<i32>) -> tensor<8x2xf32>
  %1 = stablehlo.dynamic_update_slice %arg0, %arg2, %arg1, %arg1 : (tensor<8x4xf32>, tensor<8x2xf32>, tensor<i32>, tensor<i32>) -> tensor<8x4xf32>
  %2 = stablehlo.dynamic_update_slice %arg0, %arg2, %c, %c : (tensor<8x4xf32>, tensor<8x2xf32>, tensor<i32>, tensor<i32>) -> tensor<8x4xf32>
  return %0, %1, %2 : tensor<8x2xf32>, tensor<8x4xf32>, tensor<8x4xf32>
}

// gather: a jnp.take along dim 0 (collapsed dim is a reduction factor).
func.func @gather(%arg0: tensor<8x4xf32>, %arg1: tensor<6x1xi32>) -> tensor<6x4xf32> {
  %0 = "stablehlo.gather"(%arg0, %arg1) {dimension_numbers = #stablehlo.gather<offset_dims = [1], collapsed_slice_dims = [0], start_index_map = [0], index_vector_dim = 1>, slice_sizes = array<i64: 1, 4>} : (tensor<8x4xf32>, tensor<6x1xi32>) -> tensor<6x4xf32>
  return %0 : tensor<6x4xf32>
}

// scatter with two inputs and an add body: the indices batch dim is a reduction.
func.func @scatter(%arg0: tensor<8x4xf32>, %arg1: tensor<8x4xf32>, %arg2: tensor<6x1xi32>, %arg3: tensor<6x4xf32>, %arg4: tensor<6x4xf32>) -> (tensor<8x4xf32>, tensor<8x4xf32>) {
  %0:2 = "stablehlo.scatter"(%arg0, %arg1, %arg2, %arg3, %arg4) ({
  ^bb0(%a: tensor<f32>, %b: tensor<f32>, %c: tensor<f32>, %d: tensor<f32>):
    %1 = stablehlo.add %a, %c : tensor<f32>
    %2 = stablehlo.add %b, %d : tensor<f32>
    stablehlo.return %1, %2 : tensor<f32>, tensor<f32>
  }) {scatter_dimension_numbers = #stablehlo.scatter<update_window_dims = [1], inserted_window_dims = [0], scatter_dims_to_operand_dims = [0], index_vector_dim = 1>} : (tensor<8x4xf32>, tensor<8x4xf32>, tensor<6x1xi32>, tensor<6x4xf32>, tensor<6x4xf32>) -> (tensor<8x4xf32>, tensor<8x4xf32>)
  return %0#0, %0#1 : tensor<8x4xf32>, tensor<8x4xf32>
}
