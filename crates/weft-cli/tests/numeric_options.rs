//! `-1` given to any numeric option outside `weft up` and `weft bench` (the list in
//! numeric_options.txt, which src/counts.rs checks is the CLI's whole list) is refused
//! as that option's value, saying what it takes, with exit status 2 and nothing done.
//! Before, clap said "unexpected argument '-1' found" (it reads `-1` as a flag).

use std::process::Command;

#[test]
fn a_negative_number_for_a_numeric_option_is_refused_saying_what_is_taken() {
    let list = include_str!("numeric_options.txt");
    let cases: Vec<(&str, &str)> = list
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .map(|l| l.split_once('\t').expect("COMMAND --OPTION<tab>ARGS"))
        .collect();
    assert_eq!(cases.len(), 43, "{list}");
    let dir = tempfile::tempdir().unwrap();
    let mut failures = Vec::new();
    for (command, rest) in cases {
        let words: Vec<&str> = command.split_whitespace().collect();
        let option = *words.last().unwrap();
        let mut args = words.clone();
        args.push("-1");
        args.extend(rest.split_whitespace());
        let out = Command::new(weft_testkit::bin("weft"))
            .args(&args)
            .current_dir(dir.path())
            .env("WEFT_HOME", dir.path().join("no-cluster"))
            .env_remove("WEFT_META")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        let says_taken = ["0 or more", "must be", "octal mode", "a stripe size is"]
            .iter()
            .any(|s| stderr.contains(s));
        if out.status.code() != Some(2)
            || !stderr.contains(&format!("invalid value '-1' for '{option}"))
            || stderr.contains("unexpected argument")
            || !says_taken
        {
            failures.push(format!("weft {}: {} {stderr}", args.join(" "), out.status));
        }
    }
    let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert!(left.is_empty(), "something was made: {left:?}");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
