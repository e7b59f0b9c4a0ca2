pub(crate) mod keys_instances;
pub(crate) mod one_dc;
