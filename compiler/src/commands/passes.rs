//! `slmcc passes`: the pass registry, as text or as the Markdown table of
//! the docs.

use std::io::Write;

use crate::cli::PassesArgs;
use crate::exit::CmdResult;

pub fn run(args: PassesArgs) -> CmdResult {
    let text = if args.markdown {
        slmcc_passes::registry::markdown_table()
    } else {
        format!(
            "Passes, in the order they usually run:\n{}",
            slmcc_passes::registry::describe_passes()
        )
    };
    std::io::stdout().write_all(text.as_bytes())?;
    Ok(())
}
