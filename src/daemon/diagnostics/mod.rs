//! What relay says of itself: `relay doctor`'s checks and `relay audit scan`
//! (docs/architecture.md).

pub mod doctor;
pub mod last_probes;
pub mod scan;
