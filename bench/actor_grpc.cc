// gRPC (Debian's 1.51) doing the actor benchmark's exchange, with the service in echo.proto,
// over a unix socket or tcp on 127.0.0.1.
//
//   round trip  synchronous unary Echo calls, one after another, each with its own
//               ClientContext (as gRPC requires), timed around the whole call. The sync
//               server hands the handler a const request, so the echo copies the payload:
//               that is what a gRPC echo costs, not something the benchmark adds.
//   stream      one client-streaming Stream call: n Write()s of 64 B, WritesDone(), and
//               Finish() returns the server's count, which is the "done". Timed from the
//               first Write() to Finish(). Writes carry the buffer hint, which lets gRPC
//               coalesce them as sceptre and CAF coalesce sends (WritesDone flushes the
//               rest): without it every sync Write waits for its own hand-off to the
//               transport, and the stream measured 0.06-0.09 M msg/s here instead of 0.21-0.25.
//
// Threads: the sync server's default pool and the client library's own; gRPC offers no
// single-threaded mode, and both stay pinned where the process is.
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "actor_peers.h"
#include "echo.grpc.pb.h"

namespace bench {
namespace {

using sceptre::bench::Bytes;
using sceptre::bench::Count;
using sceptre::bench::EchoService;

class EchoImpl final : public EchoService::Service {
  grpc::Status Echo(grpc::ServerContext*, const Bytes* request, Bytes* reply) override {
    *reply = *request;
    return grpc::Status::OK;
  }

  grpc::Status Stream(grpc::ServerContext*, grpc::ServerReader<Bytes>* reader, Count* count) override {
    Bytes message;
    std::uint64_t n = 0;
    while (reader->Read(&message)) ++n;
    count->set_messages(n);
    return grpc::Status::OK;
  }
};

std::string socket_path(pid_t server) { return "/tmp/sceptre-bench-grpc-" + std::to_string(server); }

[[noreturn]] void serve(bool unix_socket, const std::function<void(std::string)>& report) {
  std::string listen = "127.0.0.1:0";
  if (unix_socket) {
    ::unlink(socket_path(::getpid()).c_str());  // left by an earlier process with this pid
    listen = "unix:" + socket_path(::getpid());
  }
  EchoImpl service;
  int port = 0;
  grpc::ServerBuilder builder;
  builder.AddListeningPort(listen, grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server || port == 0) {  // unix listeners report 1, a failure 0
    std::fprintf(stderr, "grpc: cannot listen on %s\n", listen.c_str());
    std::abort();
  }
  report(unix_socket ? listen : "127.0.0.1:" + std::to_string(port));
  server->Wait();
  std::abort();  // nothing shuts it down; the client kills this process
}

}  // namespace

Sample run_grpc(bool unix_socket, int client_cpu, int server_cpu) {
  auto [pid, addr] = fork_server(server_cpu, [&](const auto& report) { serve(unix_socket, report); });
  pin(client_cpu);
  Sample s;
  {
    auto channel = grpc::CreateChannel(addr, grpc::InsecureChannelCredentials());
    if (!channel->WaitForConnected(std::chrono::system_clock::now() + std::chrono::seconds(10))) {
      std::fprintf(stderr, "grpc: cannot connect to %s\n", addr.c_str());
      std::abort();
    }
    auto stub = EchoService::NewStub(channel);

    for (std::size_t size : {kSmall, kLarge}) {
      int n = rtt_count(size);
      Bytes request, reply;
      request.set_data(std::string(size, 'x'));
      std::vector<double> us;
      us.reserve(n);
      for (int i = 0; i < n + warmup(n); ++i) {
        auto t = Clock::now();
        grpc::ClientContext ctx;
        grpc::Status status = stub->Echo(&ctx, request, &reply);
        if (!status.ok() || reply.data().size() != size) {
          std::fprintf(stderr, "grpc: Echo failed: %s\n", status.error_message().c_str());
          std::abort();
        }
        if (i >= warmup(n)) us.push_back(us_since(t));
      }
      (size == kSmall ? s.small : s.large) = rtt_of(us);
    }

    const int n = params.stream;
    Bytes message;
    message.set_data(std::string(kSmall, 'x'));
    Count count;
    grpc::ClientContext ctx;
    auto writer = stub->Stream(&ctx, &count);
    const grpc::WriteOptions buffered = grpc::WriteOptions().set_buffer_hint();
    auto t = Clock::now();
    for (int i = 0; i < n; ++i) {
      if (!writer->Write(message, buffered)) std::abort();
    }
    writer->WritesDone();
    grpc::Status status = writer->Finish();
    if (!status.ok() || count.messages() != static_cast<std::uint64_t>(n)) {
      std::fprintf(stderr, "grpc: Stream failed: %s\n", status.error_message().c_str());
      std::abort();
    }
    s.msgs_per_s = n / (us_since(t) / 1e6);
  }
  reap(pid);
  if (unix_socket) ::unlink(socket_path(pid).c_str());
  return s;
}

}  // namespace bench
