//! MIME types of stored files: the extension table the store uses when a write names none, for
//! callers (the fs tools) that must know in advance what a new file will be typed as.

pub use crate::files::guess_mime;
