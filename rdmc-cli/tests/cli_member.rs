//! `rdmc member` across real processes on loopback, on every transport:
//! the scenarios of `member_suite`, one line per transport. The `ofi` line
//! runs libfabric's `tcp` provider on loopback unless `RDMC_OFI_PROVIDER`
//! and `RDMC_OFI_FABRIC_ADDR` say otherwise (`verbs` on Soft-RoCE in
//! `ci/softroce-vm.sh`).

mod scratch_dir;

#[macro_use]
mod member_suite;

member_suite!(tcp, &["--transport", "tcp"]);
#[cfg(feature = "ofi")]
member_suite!(ofi, &["--transport", "ofi"], ofi_env);
