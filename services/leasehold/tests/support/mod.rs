pub mod keys_instances;
pub mod one_dc;
