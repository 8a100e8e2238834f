// One byte carrying one fd (SCM_RIGHTS): the message header and its buffers, all in the object
// (so on the stack: a child that shares its parent's memory until exec may use one, it allocates
// nothing). carry() then sendmsg(&msg), or recvmsg(&msg) then carried().
#pragma once

#include <sys/socket.h>
#include <sys/uio.h>

#include <cstring>

namespace motor {

struct FdMessage {
  char byte = 'f';
  iovec iov{&byte, 1};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  FdMessage() {
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
  }
  FdMessage(const FdMessage&) = delete;
  FdMessage& operator=(const FdMessage&) = delete;

  // To send `fd` with the byte.
  void carry(int fd) {
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(c), &fd, sizeof fd);
  }
  // After a recvmsg that returned `received` bytes: the fd that came with the byte (the caller
  // owns it), or -1.
  int carried(ssize_t received) const {
    const cmsghdr* c = received == 1 ? CMSG_FIRSTHDR(&msg) : nullptr;
    if (!c || c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS || c->cmsg_len != CMSG_LEN(sizeof(int))) return -1;
    int fd = -1;
    std::memcpy(&fd, CMSG_DATA(c), sizeof fd);
    return fd;
  }
};

}  // namespace motor
