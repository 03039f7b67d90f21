// The server in-process on a free loopback port over the tiny Llama fixture (no tokenizer, so
// prompts are token ids), its engine stepped by a thread of the test, which can pause it to fill
// the queue. Shared by the server's HTTP and limits tests.
#pragma once

#include <gtest/gtest.h>
#include <httplib.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "backend/cpu/cpu_backend.h"
#include "model/decoder.h"
#include "server/server.h"

namespace mvllm::server {

struct ServerFixtureSetup {
    int64_t max_model_len = 512;
    int step_delay_ms = 1;    // pause after each busy step: streams slow enough to leave mid-way
    bool listen = true;       // false: bound but not accepting
    bool self_draft = false;  // speculative decoding with the model as its own draft (fallback off)
    bool keep_port = false;   // the port of the ServerOptions instead of a free one
};

struct ServerFixture {

    std::unique_ptr<Model> model;
    std::unique_ptr<CpuBackend> backend;
    std::unique_ptr<Decoder> decoder;
    std::unique_ptr<Engine> engine;
    std::unique_ptr<Server> server;
    std::atomic<bool> stop{false}, paused{false};
    std::thread stepper;

    explicit ServerFixture(ServerOptions o = {}, ServerFixtureSetup s = {}) {
        model = std::move(load_model(MVLLM_FIXTURE_DIR "/tiny-llama").value());
        CpuBackendOptions bo;
        bo.n_threads = 1;
        backend = std::make_unique<CpuBackend>(bo);
        decoder = std::move(Decoder::create(*model, *backend).value());
        EngineOptions eo;
        eo.kv_cache_blocks = 64;
        eo.block_size = 16;
        eo.max_model_len = s.max_model_len;
        if (s.self_draft) {
            eo.speculative.draft = decoder.get();
            eo.speculative.draft_tokens = 3;
            eo.speculative.fallback = false;
        }
        engine = std::move(Engine::create(*decoder, eo).value());
        if (!s.keep_port) o.port = 0;
        o.max_model_len = s.max_model_len;
        o.drain_timeout_s = 1;
        server = std::make_unique<Server>(*engine, nullptr, o);
        EXPECT_TRUE(server->bind().is_ok());
        if (s.listen) server->start();
        stepper = std::thread([this, delay = s.step_delay_ms] {
            while (!stop) {
                if (paused || !engine->step()) std::this_thread::sleep_for(std::chrono::milliseconds(2));
                else if (delay > 0) std::this_thread::sleep_for(std::chrono::milliseconds(delay));
            }
        });
    }
    ~ServerFixture() {
        paused = false;
        server->shutdown();
        stop = true;
        stepper.join();
        engine->run_until_idle();
    }
    httplib::Client client(const std::string& host = "127.0.0.1") {
        httplib::Client c(host, server->port());
        c.set_read_timeout(30, 0);
        c.set_connection_timeout(2, 0);
        return c;
    }
    int64_t used_blocks() { return engine->counters().n_total_blocks - engine->counters().n_free_blocks; }
    // The KV blocks still in use once the engine thread has caught up (it may free a finished
    // sequence's blocks just after its response went out): polls for up to 5 s for none.
    int64_t settled_used_blocks() {
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
        while (used_blocks() != 0 && std::chrono::steady_clock::now() < deadline)
            std::this_thread::sleep_for(std::chrono::milliseconds(5));
        return used_blocks();
    }
};

}  // namespace mvllm::server
