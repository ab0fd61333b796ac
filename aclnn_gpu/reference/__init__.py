"""NumPy implementations of every operator (layer 2 of docs/DESIGN.md, "Import layers": it imports only
base): what the cpu device runs, and the tests' second reference.

One module per operator family (`conv_tbc`, `cross_entropy`, `ctc_loss`, `kl_div`,
`scaled_masked_softmax`), with `lowp` (fast float16 <-> float32 conversions) and `parallel` (the one
thread pool they share).
"""
