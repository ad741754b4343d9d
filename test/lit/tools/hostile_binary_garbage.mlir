// RUN: %python -c "import random, sys; r = random.Random(7); sys.stdout.buffer.write(bytes(r.randrange(256) for _ in range(4096)))" > %t.mlir
// RUN: not shardc-opt %t.mlir 2>&1 | filecheck %s
// RUN: not shardc-opt %t.mlir --split-input-file --verify-diagnostics 2>&1 | filecheck %s
// CHECK-NOT: Traceback
// CHECK: error:
// CHECK-NOT: Traceback
