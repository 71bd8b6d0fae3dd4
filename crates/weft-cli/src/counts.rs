//! The numeric options of `weft up` and `weft bench`: a negative number given to one
//! is its value, refused saying which counts the option takes, rather than clap's
//! "unexpected argument '-1'" (clap takes a value that starts with `-` for an option).

use clap::builder::TypedValueParser;
use clap::error::{ContextKind, ContextValue, ErrorKind};
use clap::{Arg, Command};
use std::marker::PhantomData;

/// `cli` with every option of `weft up` and of `weft bench` (and its subcommands)
/// of one value taking one that starts with `-` (a negative number) as its value, for
/// its parser to refuse (`explain`).
pub fn checked(cli: Command) -> Command {
    cli.mut_subcommand("up", negatives_are_values)
        .mut_subcommand("bench", negatives_are_values)
}

fn negatives_are_values(command: Command) -> Command {
    command
        .mut_args(|arg| {
            let one_value = arg
                .get_num_args()
                .is_none_or(|n| n.min_values() == 1 && n.max_values() == 1);
            match !arg.is_positional() && arg.get_action().takes_values() && one_value {
                // Any value that starts with `-`, not only a number: "-1M" too.
                true => arg.allow_hyphen_values(true),
                false => arg,
            }
        })
        .mut_subcommands(negatives_are_values)
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
