//! Embeds the git revision this binary is built from (see weft-build-info).

fn main() {
    weft_build_info::emit();
}
