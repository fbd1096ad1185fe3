//! The plain-loop block of [`super::vector_block`]: the fallback where the
//! CPU has no dot-product path (the results are the same on every path).

use super::{BlockSums, Span, BLOCK};

/// `block` for `span`.
///
/// # Safety
/// The span's rows and columns lie inside its weight.
pub(super) unsafe fn block(span: Span, block: &mut BlockSums) {
    let Span {
        int4,
        w,
        tile,
        k0,
        steps,
        c,
    } = span;
    for k in k0..k0 + 4 * steps {
        for j in 0..BLOCK {
            let q = w.get(int4, k, c + j);
            block.csum[j] += q;
            for r in 0..tile.rows {
                block.raw[r][j] += tile.x(r, k) * q;
            }
        }
    }
}
