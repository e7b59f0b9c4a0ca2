pub mod keys_instances;
