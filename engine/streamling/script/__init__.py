"""User scripts (JavaScript, TypeScript) run in a QuickJS sandbox compiled to WebAssembly.

`sandbox` owns the engine (limits, the once-per-batch call, error classification), `codec` moves Arrow
batches in and out of it, and `typescript` turns TypeScript into JavaScript with Sucrase, inside the same
kind of sandbox. The operator that uses them is `streamling.script.transform`.
"""
