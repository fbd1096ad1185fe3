//! The weights' progress while a package is written: tensors and bytes
//! written, and the time left at the rate so far, on one stderr line that
//! redraws itself, shown only when stderr is a terminal (logs and CI see
//! nothing).

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

use slmcc_ir::weights::SafetensorsLayout;

/// Redraws at most this often.
const EVERY: Duration = Duration::from_millis(250);

/// The progress line of one weights blob.
pub struct Progress {
    started: Instant,
    shown: Option<Instant>,
    /// Where each tensor's bytes (and padding) end in the blob, in order.
    ends: Vec<usize>,
    total: usize,
}

impl Progress {
    /// The progress of writing `layout`'s blob, or `None` when stderr is
    /// not a terminal.
    pub fn on_terminal(layout: &SafetensorsLayout) -> Option<Progress> {
        std::io::stderr()
            .is_terminal()
            .then(|| Progress::new(layout))
    }

    fn new(layout: &SafetensorsLayout) -> Progress {
        let mut at = layout.head.len();
        let ends = layout
            .pieces
            .iter()
            .map(|p| {
                at += p.len + p.pad;
                at
            })
            .collect();
        Progress {
            started: Instant::now(),
            shown: None,
            ends,
            total: layout.len,
        }
    }

    /// Redraws the line for `written` bytes of the blob, unless it was
    /// drawn less than [`EVERY`] ago.
    pub fn update(&mut self, written: usize) {
        if self.shown.is_some_and(|t| t.elapsed() < EVERY) {
            return;
        }
        self.shown = Some(Instant::now());
        let line = self.line(written, self.started.elapsed());
        let mut err = std::io::stderr().lock();
        let _ = write!(err, "\r{line}\x1b[K");
        let _ = err.flush();
    }

    /// Ends the line, if one was drawn.
    pub fn finish(&mut self) {
        if self.shown.take().is_some() {
            let line = self.line(self.total, self.started.elapsed());
            eprintln!("\r{line}\x1b[K");
        }
    }

    /// `written` bytes after `elapsed`: the tensors done, the bytes, and
    /// the time left at the rate so far.
    fn line(&self, written: usize, elapsed: Duration) -> String {
        let done = self.ends.partition_point(|&end| end <= written);
        let secs = elapsed.as_secs_f64();
        let left = if written >= self.total {
            format!("done in {secs:.1} s")
        } else if written == 0 || secs == 0.0 {
            "time left unknown".to_string()
        } else {
            let rest = (self.total - written) as f64 * secs / written as f64;
            format!("about {rest:.0} s left")
        };
        format!(
            "writing weights: {done}/{} tensors, {:.2}/{:.2} GB, {left}",
            self.ends.len(),
            written as f64 / 1e9,
            self.total as f64 / 1e9
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use slmcc_ir::weights::LayoutPiece;

    #[test]
    fn the_line_counts_whole_tensors_and_estimates_the_rest() {
        let piece = |len, pad| LayoutPiece {
            name: String::new(),
            len,
            pad,
        };
        let layout = SafetensorsLayout {
            head: vec![0; 100],
            pieces: vec![piece(900, 0), piece(1000, 0), piece(2000, 0)],
            len: 4000,
        };
        let p = Progress::new(&layout);
        let s = |secs| Duration::from_secs(secs);
        assert_eq!(
            p.line(2000, s(4)),
            "writing weights: 2/3 tensors, 0.00/0.00 GB, about 4 s left"
        );
        assert!(p.line(1999, s(4)).starts_with("writing weights: 1/3"));
        assert!(p.line(0, s(0)).ends_with("time left unknown"));
        assert!(p
            .line(4000, s(8))
            .ends_with("3/3 tensors, 0.00/0.00 GB, done in 8.0 s"));
    }
}
