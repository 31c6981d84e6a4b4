//! The `connop` command line (being written).

fn main() {}
