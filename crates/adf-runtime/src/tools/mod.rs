//! The tool registry and access model. Being written; see issue 4.
