#pragma once
/// Plain TCP connections to servers under test on loopback.

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>

namespace mpakt::test {

/// A TCP connection to 127.0.0.1:port, from `source` (another loopback address, 127.0.0.2 say,
/// shows a server reporting the client's own); the socket, connected (a failure is a test
/// failure).
inline int connect_loopback(std::uint16_t port, const char* source = "127.0.0.1") {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in src{};
  src.sin_family = AF_INET;
  ::inet_pton(AF_INET, source, &src.sin_addr);
  EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&src), sizeof src), 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  return fd;
}

}  // namespace mpakt::test
