//! Ops that reduce along axes: `reduce_*`, `softmax`, `cum_sum`, and the
//! normalizations `layer_norm` and `rms_norm`.

pub mod cum_sum;
pub mod layer_norm;
pub mod reduce;
pub mod rms_norm;
pub mod softmax;
