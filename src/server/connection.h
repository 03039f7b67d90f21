// Is the client of an HTTP request still there? cpp-httplib 0.11 hands a handler no socket and
// notices a vanished client only when a write fails, which a non-streaming request never does
// before its answer is ready. ClientConnection finds the request's socket by its TCP 4-tuple
// (local port, peer address and port: unique while the connection is open, and the worker thread
// that runs the handler keeps it open until the handler returns) and asks the kernel whether the
// peer has closed or reset it, without reading or writing anything.
//
//   ClientConnection conn = ClientConnection::of(req);   // once per request (scans our fds)
//   if (conn.gone()) abort ...;                          // cheap: one poll(2), no blocking
#pragma once

#include <httplib.h>

namespace mvllm::server {

class ClientConnection {
public:
    // The socket of req's connection; an unknown one (not found: then gone() is always false).
    static ClientConnection of(const httplib::Request& req);

    bool known() const { return fd_ >= 0; }
    // True once the peer closed its end (FIN) or reset the connection. Data the client sent after
    // its request (a pipelined request) does not count as gone.
    bool gone() const;

private:
    int fd_ = -1;
};

}  // namespace mvllm::server
