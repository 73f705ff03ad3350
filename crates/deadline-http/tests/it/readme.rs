//! The front page's quick start is the example file, so what a reader pastes is what
//! `cargo clippy --all-targets` compiles.

const README: &str = include_str!("../../../../README.md");
const QUICK_START: &str = include_str!("../../examples/quick_start.rs");

/// The text between `<!-- NAME: begin -->` and `<!-- NAME: end -->`, without the code fence.
fn fenced_block<'a>(text: &'a str, name: &str) -> Option<&'a str> {
    let begin = format!("<!-- {name}: begin -->\n");
    let end = format!("<!-- {name}: end -->");
    let start = text.find(&begin)? + begin.len();
    let block = &text[start..start + text[start..].find(&end)?];
    let block = block.strip_prefix("```rust\n")?;
    block.strip_suffix("```\n")
}

#[test]
fn the_readme_quick_start_is_the_example_file() {
    let shown = fenced_block(README, "quick_start.rs").expect("the README marks its quick start");
    assert_eq!(
        shown.trim_end(),
        QUICK_START.trim_end(),
        "README.md's quick start differs from crates/deadline-http/examples/quick_start.rs: \
         copy the file into the README"
    );
}

#[test]
fn the_readme_quick_start_names_only_the_crates_its_cargo_lines_add() {
    // Every crate the snippet uses must be among the `[dependencies]` lines shown above it.
    let toml_start = README
        .find("```toml\n[dependencies]\n")
        .expect("a Cargo.toml snippet");
    let toml = &README[toml_start..toml_start + README[toml_start..].find("\n```\n").unwrap()];
    for (krate, line) in [
        ("axum", "axum = "),
        ("tokio", "tokio = "),
        ("deadline_http", "deadline-http = "),
    ] {
        assert!(
            QUICK_START.contains(&format!("{krate}::")),
            "the quick start uses {krate}"
        );
        assert!(toml.contains(line), "the Cargo.toml lines add {krate}");
    }
    assert!(
        !QUICK_START.contains("deadline::"),
        "a user's crate cannot name the core `deadline`"
    );
}
