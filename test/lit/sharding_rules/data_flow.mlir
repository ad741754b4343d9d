// RUN: shardc-opt %s -shardc-populate-op-sharding-rules | filecheck %s
// RUN: shardc-opt %s -sdy-populate-op-sharding-rules | filecheck %s

// CHECK-LABEL: func @data_flow(
// CHECK: stablehlo.optimization_barrier %arg0 : tensor<8xf32>{{$}}
// CHECK: stablehlo.while(%iterArg = %0) : tensor<8xf32>{{$}}
// CHECK: stablehlo.constant dense<false> : tensor<i1>{{$}}
// CHECK: stablehlo.negate{{.*}}{sdy.sharding_rule = #sdy.op_sharding_rule<([i])->([i]) {i=8}>}

// Data-flow ops get no rule (edges link their values); ops in their bodies do.
func.func @data_flow(%arg0: tensor<8xf32>) -> (tensor<8xf32>, tensor<8xf32>) {
  %0 = stablehlo.optimization_barrier %arg0 : tensor<8xf32>
  %1 = stablehlo.while(%iterArg = %0) : tensor<8xf32>
    cond {
    %c = stablehlo.constant dense<false> : tensor<i1>
    stablehlo.return %c : tensor<i1>
  } do {
    %2 = stablehlo.negate %iterArg : tensor<8xf32>
    stablehlo.return %2 : tensor<8xf32>
  }
  return %0, %1 : tensor<8xf32>, tensor<8xf32>
}
