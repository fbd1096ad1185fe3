//! Element-wise ops and NumPy broadcasting: `binary` (arithmetic, comparison,
//! logic), `unary`, `cast`, `where`, and the broadcast rules they share.

pub mod binary;
pub mod broadcast;
pub mod cast;
pub mod unary;
pub mod where_;
