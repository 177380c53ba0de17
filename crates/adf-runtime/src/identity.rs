//! Agent identity lifecycle. Being written; see issue 3.
