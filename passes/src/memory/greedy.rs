//! Offset assignment by greedy-by-size, and the live-peak lower bound.
//!
//! The buffers are placed largest first (ties: earlier birth first, then
//! index), each at the lowest offset where it overlaps no already placed
//! buffer whose lifetime intersects its own. With equal sizes this is
//! interval colouring in order of birth, which is optimal (arena = lower
//! bound); in general it is a heuristic whose result the plan records beside
//! the lower bound.

/// A block of bytes to place: its size and lifetime `[first, last]` (inclusive steps).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Buffer {
    pub size: u64,
    pub first: usize,
    pub last: usize,
}

impl Buffer {
    fn live_with(&self, other: &Buffer) -> bool {
        self.first <= other.last && other.first <= self.last
    }
}

/// Where each buffer goes, and the arena size that holds them all.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Placement {
    pub offsets: Vec<u64>,
    pub size: u64,
}

/// Places `buffers` greedily by size (see the module doc). Offsets are
/// multiples of the sizes' common alignment when every size is a multiple
/// of it (the planner passes sizes rounded to 64 bytes).
pub fn greedy_by_size(buffers: &[Buffer]) -> Placement {
    let mut order: Vec<usize> = (0..buffers.len()).collect();
    order.sort_by_key(|&i| (std::cmp::Reverse(buffers[i].size), buffers[i].first, i));
    let mut offsets = vec![0u64; buffers.len()];
    let mut placed: Vec<usize> = Vec::with_capacity(buffers.len());
    let mut arena = 0u64;
    let mut conflicts: Vec<(u64, u64)> = Vec::new();
    for i in order {
        let b = buffers[i];
        if b.size == 0 {
            continue;
        }
        conflicts.clear();
        conflicts.extend(
            placed
                .iter()
                .filter(|&&j| buffers[j].live_with(&b))
                .map(|&j| (offsets[j], offsets[j] + buffers[j].size)),
        );
        conflicts.sort_unstable();
        let mut offset = 0u64;
        for &(start, end) in &conflicts {
            if offset + b.size <= start {
                break;
            }
            offset = offset.max(end);
        }
        offsets[i] = offset;
        arena = arena.max(offset + b.size);
        placed.push(i);
    }
    Placement {
        offsets,
        size: arena,
    }
}

/// The largest sum of sizes of buffers live at one step: no placement of
/// `buffers` fits in less.
pub fn live_peak(buffers: &[Buffer]) -> u64 {
    let steps = buffers.iter().map(|b| b.last + 1).max().unwrap_or(0);
    let mut delta = vec![0i128; steps + 1];
    for b in buffers {
        delta[b.first] += i128::from(b.size);
        delta[b.last + 1] -= i128::from(b.size);
    }
    let (mut cur, mut peak) = (0i128, 0i128);
    for d in &delta[..steps] {
        cur += d;
        peak = peak.max(cur);
    }
    peak as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(size: u64, first: usize, last: usize) -> Buffer {
        Buffer { size, first, last }
    }

    #[test]
    fn reuses_dead_bytes() {
        // a and c never live together: c goes where a was.
        let bufs = [b(128, 0, 1), b(64, 1, 2), b(128, 2, 3)];
        let p = greedy_by_size(&bufs);
        assert_eq!(p.offsets, vec![0, 128, 0]);
        assert_eq!(p.size, 192);
        assert_eq!(live_peak(&bufs), 192);
    }

    #[test]
    fn fills_the_lowest_gap_that_fits() {
        // Big blocks at [0,256) and [320,576) for steps 0..=1 leave a 64-byte hole.
        let bufs = [b(256, 0, 1), b(256, 0, 0), b(256, 1, 1), b(64, 0, 1)];
        let p = greedy_by_size(&bufs);
        assert_eq!(p.offsets, vec![0, 256, 256, 512]);
        assert_eq!(p.size, 576);
    }

    #[test]
    fn empty_and_zero_sized() {
        assert_eq!(greedy_by_size(&[]).size, 0);
        let p = greedy_by_size(&[b(0, 0, 0), b(64, 0, 0)]);
        assert_eq!(p.size, 64);
        assert_eq!(live_peak(&[]), 0);
    }
}
