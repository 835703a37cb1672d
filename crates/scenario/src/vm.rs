//! The vocabulary of QEMU tenants (`tenant.backend = "qemu"`): the guest's
//! devices (`[tenant.vm]`, the disk's model in `[tenant.disk]`) and the
//! host's accelerator choice (`host.accel`). Document 001's finding is
//! about exactly these: emulated NIC and disk in the vCPU's path against
//! virtio with vhost and an I/O thread.

use serde::{Deserialize, Serialize};

/// The guest's network card.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
pub enum NicModel {
    /// Paravirtual: the guest and the VMM share rings.
    #[default]
    #[serde(rename = "virtio-net")]
    VirtioNet,
    /// Intel 82540EM, emulated register by register (document 001's
    /// emulated NIC).
    #[serde(rename = "e1000")]
    E1000,
    /// Realtek 8139, emulated.
    #[serde(rename = "rtl8139")]
    Rtl8139,
}

impl NicModel {
    /// QEMU's device name.
    pub fn device(self) -> &'static str {
        match self {
            NicModel::VirtioNet => "virtio-net-pci",
            NicModel::E1000 => "e1000",
            NicModel::Rtl8139 => "rtl8139",
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            NicModel::VirtioNet => "virtio-net",
            NicModel::E1000 => "e1000",
            NicModel::Rtl8139 => "rtl8139",
        }
    }
}

/// The guest's disk controller.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
pub enum DiskModel {
    #[default]
    #[serde(rename = "virtio-blk")]
    VirtioBlk,
    /// PIIX IDE (an i440FX machine), emulated.
    #[serde(rename = "ide")]
    Ide,
    /// AHCI SATA (a Q35 machine), emulated.
    #[serde(rename = "ahci")]
    Ahci,
}

impl DiskModel {
    pub fn as_str(self) -> &'static str {
        match self {
            DiskModel::VirtioBlk => "virtio-blk",
            DiskModel::Ide => "ide",
            DiskModel::Ahci => "ahci",
        }
    }
}

/// How the VMM opens the guest's image: through the host page cache or
/// around it (O_DIRECT).
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum DiskCache {
    #[default]
    Writeback,
    None,
}

impl DiskCache {
    pub fn as_str(self) -> &'static str {
        match self {
            DiskCache::Writeback => "writeback",
            DiskCache::None => "none",
        }
    }
}

/// How QEMU submits the image's reads and writes (`aio=`): its thread
/// pool, Linux AIO (needs `cache = "none"`) or io_uring.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum DiskAio {
    #[default]
    Threads,
    Native,
    IoUring,
}

impl DiskAio {
    pub fn as_str(self) -> &'static str {
        match self {
            DiskAio::Threads => "threads",
            DiskAio::Native => "native",
            DiskAio::IoUring => "io_uring",
        }
    }
}

/// The image file's format.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum ImageFormat {
    #[default]
    Raw,
    Qcow2,
}

impl ImageFormat {
    pub fn as_str(self) -> &'static str {
        match self {
            ImageFormat::Raw => "raw",
            ImageFormat::Qcow2 => "qcow2",
        }
    }
}

/// `host.accel`: which accelerator runs the guests.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum AccelChoice {
    /// KVM when a probe guest actually boots with it, else TCG.
    #[default]
    Auto,
    Kvm,
    /// Instruction translation: works everywhere, slow, no VM exits.
    Tcg,
}

/// `[tenant.vm]`: the guest's network card and where its VMM threads run.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct VmConfig {
    #[serde(default)]
    pub nic: NicModel,
    /// The virtio NIC's rings served by the host kernel (vhost-net) instead
    /// of the VMM's main loop; needs /dev/vhost-net.
    #[serde(default)]
    pub vhost: bool,
    /// Policy of the VMM's I/O threads (main loop, I/O thread, vhost
    /// worker), e.g. "fifo:50": document 001's mitigation with the vCPU
    /// threads at `tenant.policy`.
    #[serde(default, with = "ontime_core::rt::policy_text")]
    pub io_policy: ontime_core::rt::Policy,
}

/// The smallest guest the kit's kernel boots and runs a probe in.
pub const MIN_GUEST_MEMORY: u64 = 128 << 20;
/// The guest's memory when `tenant.memory` is not given.
pub const DEFAULT_GUEST_MEMORY: u64 = 256 << 20;
