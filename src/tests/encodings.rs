//! (being ported)
