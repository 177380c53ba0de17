//! The migration ladder from schema 3 to 32 (missing-tables §17.1). Placeholder.
