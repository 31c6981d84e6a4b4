//! `CONNOP_HOME` holds chat text, leases and sockets: its folders are created 0700 and its
//! files 0600, whatever the umask (docs/operating.md#files). Every folder or file the application
//! makes there goes through these two functions.

use std::fs::{File, OpenOptions, Permissions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

/// A private folder's mode.
pub const DIR_MODE: u32 = 0o700;
/// A private file's mode.
pub const FILE_MODE: u32 = 0o600;

/// Creates `path` and its missing parents as folders of mode 0700 (set after creation, so no
/// umask can widen or narrow it). Folders that exist already are left as they are: `path`
/// may be one the user chose and shares on purpose.
pub fn create_dir_all(path: &Path) -> io::Result<()> {
    let mut missing = Vec::new();
    for ancestor in path.ancestors() {
        if ancestor.as_os_str().is_empty() || std::fs::symlink_metadata(ancestor).is_ok() {
            break;
        }
        missing.push(ancestor);
    }
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(DIR_MODE)
        .create(path)?;
    for created in missing {
        std::fs::set_permissions(created, Permissions::from_mode(DIR_MODE))?;
    }
    Ok(())
}

/// Creates `path` (and its missing parents) as [`create_dir_all`] does, and makes sure the
/// folder itself is 0700 even if it existed: for folders that belong to the application
/// alone (`CONNOP_HOME/runtime`).
pub fn own_dir(path: &Path) -> io::Result<()> {
    create_dir_all(path)?;
    std::fs::set_permissions(path, Permissions::from_mode(DIR_MODE))
}

/// Opens `path` with `options`, a file it creates getting mode 0600; the file is then set to
/// 0600 (so an older, wider file is narrowed too). Narrowing a file another user owns is
/// not possible and is left at that.
pub fn open_file(options: &mut OpenOptions, path: &Path) -> io::Result<File> {
    let file = options.mode(FILE_MODE).open(path)?;
    let _ = file.set_permissions(Permissions::from_mode(FILE_MODE));
    Ok(file)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    fn mode(path: &Path) -> u32 {
        std::fs::metadata(path).unwrap().mode() & 0o777
    }

    #[test]
    fn folders_and_files_are_private_whatever_the_umask() {
        let base =
            std::env::temp_dir().join(format!("connop-private-{}", crate::sync::random_hex(6)));
        std::fs::create_dir(&base).unwrap();
        std::fs::set_permissions(&base, Permissions::from_mode(0o755)).unwrap();
        // (The binary's tests run it under umasks that take the owner's bits too.)
        let home = base.join("home");
        let runtime = home.join("runtime");
        create_dir_all(&runtime).unwrap();
        let file = runtime.join("f");
        open_file(OpenOptions::new().write(true).create(true), &file).unwrap();
        let other = base.join("other");
        create_dir_all(&other).unwrap();
        assert_eq!(
            (mode(&home), mode(&runtime), mode(&file), mode(&other)),
            (0o700, 0o700, 0o600, 0o700)
        );
        assert_eq!(mode(&base), 0o755, "an existing folder is left as it is");
        // A wider file from before is narrowed; an owned folder too.
        std::fs::set_permissions(&file, Permissions::from_mode(0o644)).unwrap();
        open_file(OpenOptions::new().read(true), &file).unwrap();
        std::fs::set_permissions(&runtime, Permissions::from_mode(0o755)).unwrap();
        own_dir(&runtime).unwrap();
        assert_eq!((mode(&file), mode(&runtime)), (0o600, 0o700));
        std::fs::remove_dir_all(&base).unwrap();
    }
}
