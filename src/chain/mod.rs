//! The patch chain: numbered patch files applied strictly, in order, on the
//! pinned base; reversed, re-exported and checked for ownership and markers.

pub mod apply;
pub mod export;
pub mod lock;
pub mod markers;
pub mod ownership;
pub mod parsed;
pub mod reverse;
pub mod series;
pub mod verify;

pub use series::{PatchFile, Series};
