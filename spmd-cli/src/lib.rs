//! The `spmd` command-line tool. This first step holds the pure logic the
//! commands are built on: the compact syntax ([`parse`]), the reshard
//! classification ([`reshard`]), the block arithmetic ([`layout`]), output
//! shapes from notations ([`shapes`]), styles and tables ([`style`]).

pub mod error;
pub mod layout;
pub mod parse;
pub mod reshard;
pub mod shapes;
pub mod style;
