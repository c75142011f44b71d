//! `setters!`: builder-style `with_<field>` methods for the public options structs, which are
//! `#[non_exhaustive]` so that a new field is not a breaking change. Outside this crate they
//! cannot be written as struct literals (not even with `..Default::default()`); a caller
//! starts from `Default::default()` (or another value) and chains setters, or assigns the
//! public fields of a mutable value, as rustls's configurations are used.

/// `setters!(Type { with_a => a: A, with_b => b: B })` adds `Type::with_a(self, A) -> Self`,
/// and so on, each documented as setting its field.
macro_rules! setters {
    ($ty:ident { $($with:ident => $field:ident: $fty:ty),* $(,)? }) => {
        impl $ty {
            $(
                #[doc = concat!("`", stringify!($ty), "::", stringify!($field), "` set to `value`.")]
                #[must_use]
                pub fn $with(mut self, value: $fty) -> Self {
                    self.$field = value;
                    self
                }
            )*
        }
    };
}
