#include "server/connection.h"

#include <dirent.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>

#include <cstdlib>
#include <string>

namespace mvllm::server {
namespace {

// The numeric host and port of a socket address, as cpp-httplib writes Request::remote_addr.
bool host_and_port(const sockaddr_storage& addr, socklen_t len, std::string* host, int* port) {
    char host_buf[NI_MAXHOST], port_buf[NI_MAXSERV];
    if (getnameinfo(reinterpret_cast<const sockaddr*>(&addr), len, host_buf, sizeof(host_buf), port_buf,
                    sizeof(port_buf), NI_NUMERICHOST | NI_NUMERICSERV) != 0)
        return false;
    *host = host_buf;
    *port = std::atoi(port_buf);
    return true;
}

bool is_connection_of(int fd, const httplib::Request& req) {
    sockaddr_storage addr{};
    socklen_t len = sizeof(addr);
    if (getpeername(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return false;  // not a connected socket
    if (addr.ss_family != AF_INET && addr.ss_family != AF_INET6) return false;
    std::string host;
    int port = -1;
    if (!host_and_port(addr, len, &host, &port) || port != req.remote_port || host != req.remote_addr) return false;
    if (req.local_port < 0) return true;
    len = sizeof(addr);
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return false;
    return host_and_port(addr, len, &host, &port) && port == req.local_port;
}

}  // namespace

ClientConnection ClientConnection::of(const httplib::Request& req) {
    ClientConnection conn;
    if (req.remote_port < 0 || req.remote_addr.empty()) return conn;
    DIR* dir = opendir("/proc/self/fd");
    if (!dir) return conn;
    const int own_fd = dirfd(dir);
    while (const dirent* entry = readdir(dir)) {
        char* end = nullptr;
        const long fd = std::strtol(entry->d_name, &end, 10);
        if (end == entry->d_name || *end != '\0' || fd == own_fd) continue;
        if (is_connection_of(static_cast<int>(fd), req)) {
            conn.fd_ = static_cast<int>(fd);
            break;
        }
    }
    closedir(dir);
    return conn;
}

bool ClientConnection::gone() const {
    if (fd_ < 0) return false;
    pollfd p{};
    p.fd = fd_;
    p.events = POLLIN | POLLRDHUP;
    if (poll(&p, 1, 0) <= 0) return false;  // nothing to report (or EINTR: ask again next time)
    return (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) != 0;
}

}  // namespace mvllm::server
