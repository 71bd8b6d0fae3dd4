//! `weft-faultfs BACKING MOUNTPOINT CONTROL`: serves BACKING at MOUNTPOINT through the
//! power-loss layer (weft_testkit::faultfs) until a file appears at CONTROL: then it
//! cuts the power (undoes what was not durable), writes what it undid to
//! CONTROL.done, unmounts and exits. It also unmounts and exits (without a cut) when
//! its standard input ends: a test process that dies takes it along (TiedDir::spawn).
//! For tests only; root mounts with mount(2).

use fuser::{Config, MountOption};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use weft_testkit::faultfs::{FaultFs, Store};

fn unmount(mountpoint: &std::path::Path) {
    let c = std::ffi::CString::new(mountpoint.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a valid C path.
    unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
}

fn main() {
    let args: Vec<PathBuf> = std::env::args_os().skip(1).map(PathBuf::from).collect();
    if args.len() != 3 {
        eprintln!("usage: weft-faultfs BACKING MOUNTPOINT CONTROL");
        std::process::exit(2);
    }
    let (backing, mountpoint, control) = (args[0].clone(), args[1].clone(), args[2].clone());
    let store = Arc::new(Store::new(&backing).unwrap_or_else(|e| {
        eprintln!("weft-faultfs: {}: {e}", backing.display());
        std::process::exit(1)
    }));
    let fs = FaultFs::new(store.clone()).expect("reading the backing root");
    let mut config = Config::default();
    config.mount_options = vec![MountOption::FSName("weft-faultfs".into())];
    config.n_threads = Some(4);
    let session = fuser::Session::new(fs, &mountpoint, &config).unwrap_or_else(|e| {
        eprintln!("weft-faultfs: mounting {}: {e}", mountpoint.display());
        std::process::exit(1)
    });
    let _session = session.spawn().expect("starting the FUSE workers");
    {
        let mountpoint = mountpoint.clone();
        std::thread::spawn(move || {
            let _ = std::io::copy(&mut std::io::stdin(), &mut std::io::sink());
            unmount(&mountpoint);
            std::process::exit(0);
        });
    }
    while !control.exists() {
        std::thread::sleep(Duration::from_millis(10));
    }
    let outcome = match store.cut() {
        Ok(s) => format!(
            "undid {} data ranges ({} bytes) and {} namespace changes\n",
            s.data_ranges, s.data_bytes, s.namespace_changes
        ),
        Err(e) => format!("error: {e}\n"),
    };
    let mut done = control.clone().into_os_string();
    done.push(".done");
    std::fs::write(&done, outcome).expect("writing the control answer");
    unmount(&mountpoint);
    std::process::exit(0);
}
