//! The numeric options of every command (and every option of `weft up` and `weft
//! bench`): a negative number given to one is its value, refused saying which counts
//! the option takes, rather than clap's "unexpected argument '-1'" (clap takes a value
//! that starts with `-` for an option).

use clap::builder::TypedValueParser;
use clap::error::{ContextKind, ContextValue, ErrorKind};
use clap::{Arg, Command};
use std::marker::PhantomData;

/// `cli` with every option of `weft up` and of `weft bench` (and its subcommands)
/// of one value, and every numeric option of one value of the other commands (those
/// whose parser gives a number: counts, sizes, milliseconds, modes), taking one that
/// starts with `-` (a negative number) as its value, for its parser to refuse
/// (`explain`). Other options of other commands keep clap's reading (`--opt -x`: `-x`
/// is a flag, not the value).
pub fn checked(cli: Command) -> Command {
    let names: Vec<String> = cli.get_subcommands().map(|c| c.get_name().to_owned()).collect();
    names.iter().fold(cli, |cli, name| match name.as_str() {
        "up" | "bench" => cli.mut_subcommand(name, |c| negatives_are_values(c, &|_| true)),
        _ => cli.mut_subcommand(name, |c| negatives_are_values(c, &is_numeric)),
    })
}

/// Whether `arg`'s parser gives a number.
pub fn is_numeric(arg: &Arg) -> bool {
    use std::any::TypeId;
    let parsed = arg.get_value_parser().type_id();
    [
        TypeId::of::<u8>(),
        TypeId::of::<u16>(),
        TypeId::of::<u32>(),
        TypeId::of::<u64>(),
        TypeId::of::<usize>(),
        TypeId::of::<i32>(),
        TypeId::of::<i64>(),
        TypeId::of::<f32>(),
        TypeId::of::<f64>(),
    ]
    .iter()
    .any(|t| parsed == *t)
}

/// Whether `arg` is an option (not a positional) that takes exactly one value.
fn one_value_option(arg: &Arg) -> bool {
    let one_value = arg
        .get_num_args()
        .is_none_or(|n| n.min_values() == 1 && n.max_values() == 1);
    !arg.is_positional() && arg.get_action().takes_values() && one_value
}

fn negatives_are_values(command: Command, chosen: &dyn Fn(&Arg) -> bool) -> Command {
    command
        .mut_args(|arg| match one_value_option(&arg) && chosen(&arg) {
            // Any value that starts with `-`, not only a number: "-1M" too.
            true => arg.allow_hyphen_values(true),
            false => arg,
        })
        .mut_subcommands(|c| negatives_are_values(c, chosen))
}

/// The numeric one-value options outside `up` and `bench`, as "COMMAND --OPTION"
/// (subcommands' names joined by spaces): what `checked` changes there.
#[cfg(test)]
pub fn numeric_options(cli: &Command) -> Vec<String> {
    fn walk(command: &Command, path: &str, out: &mut Vec<String>) {
        for arg in command.get_arguments() {
            if one_value_option(arg) && is_numeric(arg) {
                let flag = match (arg.get_long(), arg.get_short()) {
                    (Some(long), _) => format!("--{long}"),
                    (None, Some(short)) => format!("-{short}"),
                    (None, None) => continue,
                };
                out.push(format!("{path} {flag}"));
            }
        }
        for sub in command.get_subcommands() {
            walk(sub, &format!("{path} {}", sub.get_name()), out);
        }
    }
    let mut out = Vec::new();
    for sub in cli.get_subcommands() {
        if !matches!(sub.get_name(), "up" | "bench") {
            walk(sub, sub.get_name(), &mut out);
        }
    }
    out
}

/// `error`, said plainly when it refuses a negative number: that the option takes no
/// negative counts, rather than what its parser found amiss ("invalid digit found in
/// string" from an unsigned parser, a size parser's suffix rules). Errors of `Count`
/// say their range already and are left as they are.
pub fn explain(error: clap::Error) -> clap::Error {
    if !matches!(error.kind(), ErrorKind::ValueValidation | ErrorKind::InvalidValue) {
        return error;
    }
    let context = |kind| match error.get(kind) {
        Some(ContextValue::String(s)) => Some(s.clone()),
        _ => None,
    };
    let (Some(arg), Some(value)) = (
        context(ContextKind::InvalidArg),
        context(ContextKind::InvalidValue),
    ) else {
        return error;
    };
    // Parsers of our own (sizes, lifetimes, the cache tier) say what they take; the
    // plain integer parsers say "invalid digit found in string" (u64, usize) or
    // "-1 is not in 0..=4294967295" (u32).
    let said = error.to_string();
    let plain = said.contains("invalid digit found in string") || said.contains(" is not in 0..=");
    if !plain || !value.trim().parse::<i128>().is_ok_and(|n| n < 0) {
        return error;
    }
    clap::Error::raw(
        ErrorKind::ValueValidation,
        format!("invalid value '{value}' for '{arg}': the count must be 0 or more\n"),
    )
}

/// A whole number from `least` to `most`, as a `T`.
#[derive(Clone)]
pub struct Count<T> {
    least: u64,
    most: u64,
    kind: PhantomData<fn() -> T>,
}

impl<T> Count<T> {
    pub fn new(least: u64, most: u64) -> Count<T> {
        Count {
            least,
            most,
            kind: PhantomData,
        }
    }
}

impl<T> TypedValueParser for Count<T>
where
    T: TryFrom<u64> + Clone + Send + Sync + 'static,
{
    type Value = T;

    fn parse_ref(&self, cmd: &Command, arg: Option<&Arg>, value: &std::ffi::OsStr) -> Result<T, clap::Error> {
        let text = value.to_string_lossy();
        let number = text.trim().parse::<i128>().ok();
        let fits = number.filter(|n| (self.least as i128..=self.most as i128).contains(n));
        match fits.and_then(|n| T::try_from(n as u64).ok()) {
            Some(count) => Ok(count),
            None => {
                let said = match number {
                    Some(_) => format!("the count must be {}..={}", self.least, self.most),
                    None => format!(
                        "not a whole number; the count must be {}..={}",
                        self.least, self.most
                    ),
                };
                let arg = arg.map_or_else(|| "the option".to_owned(), |a| format!("'{a}'"));
                Err(clap::Error::raw(
                    ErrorKind::ValueValidation,
                    format!("invalid value '{text}' for {arg}: {said}\n"),
                )
                .with_cmd(cmd))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    /// Every numeric option outside up and bench (the list tests/numeric_options.rs
    /// runs the binary with): a new one fails here until it is added there.
    #[test]
    fn the_numeric_options_are_the_ones_the_binary_test_covers() {
        let found = numeric_options(&crate::Cli::command());
        let covered: Vec<String> = include_str!("../tests/numeric_options.txt")
            .lines()
            .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
            .map(|l| l.split('\t').next().unwrap().to_owned())
            .collect();
        assert_eq!(
            found, covered,
            "numeric options (left: the CLI's; right: tests/numeric_options.txt)"
        );
    }
}
