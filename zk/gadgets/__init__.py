"""Circuit gadgets: bits and range checks, comparisons, fixed-point arithmetic, top-K selection, Poseidon (circomlib
constants) and Poseidon Merkle trees. Each gadget has a plain-Python counterpart it is tested against."""
