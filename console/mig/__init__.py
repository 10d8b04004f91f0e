"""MIG: the catalogue of valid layouts (layouts), reading and changing them through NVML
(manager), mig-parted configs (parted), what a change does to the plan (preview), and the CLI."""
