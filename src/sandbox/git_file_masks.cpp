#include "sandbox/git_file_masks.hpp"

#include <ftw.h>
#include <sys/mount.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>

#include "sandbox/proc.hpp"

namespace motor::sandbox {
namespace {

// nftw has no context argument: the first error.
int g_mask_error = 0;

int mask_one(const char* path, const struct stat* st, int type, FTW* ftw) {
  if (type != FTW_F) return 0;  // directories, and symlinks (FTW_PHYS: never followed)
  if (!(S_ISFIFO(st->st_mode) || S_ISSOCK(st->st_mode) || S_ISCHR(st->st_mode) || S_ISBLK(st->st_mode))) return 0;
  const char* name = path + ftw->base;
  for (const char* git_file : {".gitignore", ".gitattributes", ".gitmodules", ".mailmap"}) {
    if (std::strcmp(name, git_file) != 0) continue;
    if (mount(kMaskedEmptyFile, path, nullptr, MS_BIND, nullptr) != 0) {
      g_mask_error = errno;
      return 1;
    }
  }
  return 0;
}

}  // namespace

int mask_special_git_files(const char* root, const char*& stage) {
  stage = "masking special git files";
  g_mask_error = 0;
  if (nftw(root, mask_one, 64, FTW_PHYS | FTW_MOUNT) != 0 && g_mask_error) return g_mask_error;
  return 0;
}

}  // namespace motor::sandbox
