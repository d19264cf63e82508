// Graphs and errors speak the user's language (Note [Name scopes] in
// core/error.h): a node records the path of the module that made it and the
// user's line that called that module, eagerly, hybridized, and in an
// exported then loaded graph.
#include <unistd.h>

#include <filesystem>
#include <map>
#include <memory>
#include <source_location>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "core/error.h"
#include "eager/autograd.h"
#include "eager/hybridize.h"
#include "eager/nn/nn.h"
#include "eager/ops.h"
#include "serialization/model.h"
#include "tests/error_of.h"
#include "trace/executor.h"
#include "trace/graph.h"

namespace tandem {
namespace {

using tandem::testing::error_of;
using ::testing::HasSubstr;
using ::testing::Not;

// features (Conv2d, ReLU, Flatten), then head (Linear), then an op of its own.
struct Net : nn::Module {
  explicit Net(int64_t head_inputs = 2 * 4 * 4) {
    features = register_module(
        "features",
        std::make_shared<nn::Sequential>(nn::Conv2d(1, 2, 3, 1, 1), nn::ReLU(), nn::Flatten()));
    head = register_module("head", std::make_shared<nn::Linear>(head_inputs, 3));
  }
  Tensor forward(const Tensor& x) override {
    Tensor h = (*features)(x, features_line);
    return sigmoid((*head)(h, head_line));
  }
  std::shared_ptr<nn::Sequential> features;
  std::shared_ptr<nn::Linear> head;
  // The lines the calls report: this file's, as a user's model would.
  std::source_location features_line = std::source_location::current();
  std::source_location head_line = std::source_location::current();
};

// Each op of `graph` with the scope and line of its first node.
std::map<std::string, std::pair<std::string, int>> origins(const trace::Graph& graph) {
  std::map<std::string, std::pair<std::string, int>> out;
  for (const trace::Node& node : graph.nodes) {
    out.try_emplace(node.op->name, node.scope, static_cast<int>(node.where.line()));
  }
  return out;
}

TEST(ModuleScopeTest, TracedNodesCarryTheModulePathAndTheCallersLine) {
  Net net;
  net.eval();
  net.hybridize(true, {.optimize = false});
  NoGradGuard no_grad;
  net(randn({2, 1, 4, 4}));
  const trace::Graph& graph = net.hybrid_forward()->last_executor()->graph();
  auto by_op = origins(graph);
  const int features = static_cast<int>(net.features_line.line());
  const int head = static_cast<int>(net.head_line.line());
  EXPECT_EQ(by_op["conv2d"], std::make_pair(std::string("features.0"), features));
  EXPECT_EQ(by_op["relu"], std::make_pair(std::string("features.1"), features));
  EXPECT_EQ(by_op["linear"], std::make_pair(std::string("head"), head));
  EXPECT_EQ(by_op["sigmoid"].first, "");  // The traced module's own op.
  EXPECT_THAT(trace::to_text(graph), HasSubstr(str_cat("module_scope_test.cc:", head, " in head")));
  EXPECT_THAT(trace::to_dot(graph), HasSubstr("\\nfeatures.0\""));
}

TEST(ModuleScopeTest, OptimizedNodesKeepTheirModule) {
  Net net;
  net.eval();
  net.hybridize();
  NoGradGuard no_grad;
  net(randn({2, 1, 4, 4}));
  auto by_op = origins(net.hybrid_forward()->last_executor()->graph());
  // relu fused into the convolution, which keeps its own module.
  EXPECT_EQ(by_op.count("relu"), 0u);
  EXPECT_EQ(by_op["conv2d"].first, "features.0");
  EXPECT_EQ(by_op["linear"].first, "head");
}

TEST(ModuleScopeTest, AnEagerErrorNamesTheModuleAndTheUsersLine) {
  Net net(/*head_inputs=*/5);  // Wrong for what features makes.
  const std::string message = error_of([&] { net(randn({2, 1, 4, 4})); });
  EXPECT_THAT(message, HasSubstr("Linear(5 -> 3) expects input of shape [..., 5], got [2, 32]"));
  EXPECT_THAT(message,
              HasSubstr(str_cat("module_scope_test.cc:", net.head_line.line(), ", in head)")));
  EXPECT_THAT(message, Not(HasSubstr("nn/linear.cc")));
}

TEST(ModuleScopeTest, ALayerInsideASequentialNamesItsWholePath) {
  Net net;
  const std::string message = error_of([&] { net(randn({2, 3, 4, 4})); });
  EXPECT_THAT(message, HasSubstr(str_cat("module_scope_test.cc:", net.features_line.line(),
                                         ", in features.0)")));
}

TEST(ModuleScopeTest, ExportedGraphsKeepTheModulePaths) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / str_cat("tandem-scope-", ::getpid());
  fs::create_directories(dir);
  Net net;
  net.eval();
  net.hybridize();
  {
    NoGradGuard no_grad;
    net(randn({2, 1, 4, 4}));
  }
  net.export_model((dir / "net").string());
  LoadedModel loaded = load((dir / "net").string());
  auto by_op = origins(loaded.file().graph);
  EXPECT_EQ(by_op["conv2d"].first, "features.0");
  EXPECT_EQ(by_op["linear"].first, "head");
  fs::remove_all(dir);
}

}  // namespace
}  // namespace tandem
