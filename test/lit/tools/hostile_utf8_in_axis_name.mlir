// An axis name holding a byte that is not UTF-8: jaxlib aborts the process when
// a parse error quotes it, so shardc-opt refuses the input first, at the byte.
// RUN: %python -c "import sys; sys.stdout.buffer.write(b'sdy.mesh @mesh = <[\"a\"=2]>\nfunc.func @f(%%arg0: tensor<8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{\"\xe1\"}]>}) -> tensor<8xf32> {\n  return %%arg0 : tensor<8xf32>\n}\n')" > %t.mlir
// RUN: not shardc-opt %t.mlir 2>&1 | filecheck %s
// CHECK-NOT: Traceback
// CHECK: .mlir:2:75: error: invalid UTF-8 byte 0xE1 in the input
