//! The runtime home directory. Being written; see issue 3.
