// tandem-run: runs an exported model, or an ONNX file, on NumPy inputs.
//
//   tandem-run cnn.json --input x=images.npy --output out/ --repeat 100
//   tandem-run resnet18.onnx --input images.npy
//
// Prints the model's signature and a summary of each output (dtype, shape,
// range, mean, first values); --output writes each output as DIR/<name>.npy
// (an output whose name is not a plain file name is refused before anything
// runs: serialization/file_name.h);
// --repeat N times N more calls and prints the latency distribution. A bad
// model or input file is a one-line error and exit status 1; bad arguments,
// usage and status 2.
//
// Started by mpirun, or with TANDEM_RANK and its siblings
// (distributed/distributed.h), it runs as one rank of a world, for graphs
// that hold collectives (all_reduce, ...; a hybridized step of a
// data-parallel program):
//
//   mpirun -np 2 tandem-run step.json --input x=shard{rank}.npy --output out/
//
// "{rank}" in an --input path is this process's rank, and each rank writes
// its outputs under DIR/rank<N>/. Without a launcher such a graph is
// refused at load, since its process group does not exist.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "core/error.h"
#include "serialization/file_name.h"
#include "serialization/model.h"
#include "serialization/npy.h"
#include "serialization/onnx_import.h"

#include "distributed/distributed.h"

namespace {

using tandem::Tensor;

struct Arguments {
  std::string model;
  std::map<std::string, std::string> inputs;  // Name -> .npy path; "" when unnamed.
  std::map<std::string, std::string> known;   // ONNX inputs fixed at import: name -> .npy.
  std::string output_dir;
  int repeat = 0;
};

[[noreturn]] void usage(const std::string& problem) {
  if (!problem.empty()) std::cerr << "tandem-run: " << problem << "\n";
  std::cerr << "usage: tandem-run MODEL.json|MODEL.onnx [--input NAME=FILE.npy]... "
               "[--known NAME=FILE.npy]... [--output DIR] [--repeat N]\n"
               "  --input   a model input from a NumPy .npy file (NAME= may be left out\n"
               "            when the model has one input; {rank}: this process's rank)\n"
               "  --known   NAME=FILE.npy: an ONNX input fixed at import (one an op needs as\n"
               "            a value, such as a Reshape's shape); the model no longer takes it\n"
               "  --output  write each output as DIR/<output name>.npy (DIR/rank<N>/ on\n"
               "            each rank of a world, for a model that holds collectives)\n"
               "  --repeat  time N more calls and print the latency distribution\n";
  std::exit(2);
}

Arguments parse_arguments(int argc, char** argv) {
  Arguments args;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage(arg + " needs a value");
      return argv[++i];
    };
    if (arg == "--input") {
      std::string spec = value();
      size_t eq = spec.find('=');
      std::string name = eq == std::string::npos ? "" : spec.substr(0, eq);
      if (!args.inputs.emplace(name, spec.substr(eq == std::string::npos ? 0 : eq + 1)).second) {
        usage("input '" + name + "' given twice");
      }
    } else if (arg == "--known") {
      std::string spec = value();
      size_t eq = spec.find('=');
      if (eq == std::string::npos) usage("--known takes NAME=FILE.npy, got '" + spec + "'");
      if (!args.known.emplace(spec.substr(0, eq), spec.substr(eq + 1)).second) {
        usage("known input '" + spec.substr(0, eq) + "' given twice");
      }
    } else if (arg == "--output") {
      args.output_dir = value();
    } else if (arg == "--repeat") {
      std::string n = value();
      char* end = nullptr;
      long parsed = std::strtol(n.c_str(), &end, 10);
      if (end == n.c_str() || *end != '\0' || parsed < 0 || parsed > 10'000'000) {
        usage("--repeat takes a count from 0 to 10000000, got '" + n + "'");
      }
      args.repeat = static_cast<int>(parsed);
    } else if (arg == "-h" || arg == "--help") {
      usage("");
    } else if (!arg.empty() && arg[0] == '-') {
      usage("unknown option '" + arg + "'");
    } else if (args.model.empty()) {
      args.model = arg;
    } else {
      usage("more than one model given ('" + args.model + "', '" + arg + "')");
    }
  }
  if (args.model.empty()) usage("no model given");
  if (!args.known.empty() && !args.model.ends_with(".onnx")) usage("--known is for ONNX models");
  return args;
}

// `path` with each "{rank}" replaced by `rank`.
std::string for_rank(std::string path, int rank) {
  const std::string placeholder = "{rank}";
  for (size_t at; (at = path.find(placeholder)) != std::string::npos;) {
    path.replace(at, placeholder.size(), std::to_string(rank));
  }
  return path;
}

std::string spec_text(const tandem::LoadedModel::TensorSpec& spec) {
  return spec.name + ": " + std::string(tandem::dtype_name(spec.dtype)) + spec.shape_text();
}

// The elements as doubles, for the summary.
std::vector<double> values_of(const Tensor& t) {
  auto convert = [](const auto& values) {
    return std::vector<double>(values.begin(), values.end());
  };
  switch (t.dtype()) {
    case tandem::DType::kFloat32:
      return convert(t.to_vector<float>());
    case tandem::DType::kFloat64:
      return t.to_vector<double>();
    case tandem::DType::kInt32:
      return convert(t.to_vector<int32_t>());
    case tandem::DType::kInt64:
      return convert(t.to_vector<int64_t>());
    case tandem::DType::kUInt8:
      return convert(t.to_vector<uint8_t>());
    case tandem::DType::kBool: {
      std::vector<double> out;
      for (bool b : t.to_vector<bool>()) out.push_back(b ? 1.0 : 0.0);
      return out;
    }
    default:
      return {};  // float16/bfloat16: shape only.
  }
}

void print_summary(const std::string& name, const Tensor& t) {
  std::printf("  %s: %s%s", name.c_str(), std::string(tandem::dtype_name(t.dtype())).c_str(),
              t.shape().to_string().c_str());
  std::vector<double> v = values_of(t);
  if (!v.empty()) {
    double sum = 0;
    for (double x : v) sum += x;
    std::printf("  min %.6g  max %.6g  mean %.6g  first [", *std::min_element(v.begin(), v.end()),
                *std::max_element(v.begin(), v.end()), sum / static_cast<double>(v.size()));
    for (size_t i = 0; i < std::min<size_t>(v.size(), 5); ++i) {
      std::printf("%s%.6g", i ? ", " : "", v[i]);
    }
    std::printf("%s]", v.size() > 5 ? ", ..." : "");
  }
  std::printf("\n");
}

int run(const Arguments& args) {
  // One rank of a world: the world exists before the graph that names its
  // process group is loaded.
  int rank = 0;
  std::filesystem::path output_dir = args.output_dir;
  if (tandem::distributed::launched_as_rank()) {
    tandem::distributed::init();
    rank = tandem::distributed::rank();
    const int size = tandem::distributed::world_size();
    if (size > 1 && !output_dir.empty()) output_dir /= "rank" + std::to_string(rank);
    std::printf("rank %d of %d\n", rank, size);
  }
  tandem::LoadedModel model =
      args.model.ends_with(".onnx") ? tandem::import_onnx(args.model) : tandem::load(args.model);
  // The names come from the model file: each must stay inside DIR.
  std::vector<std::string> output_files;
  if (!args.output_dir.empty()) {
    for (const auto& spec : model.outputs()) {
      output_files.push_back(tandem::serialization::checked_file_name(
          spec.name, ".npy", "model '" + args.model + "': output name"));
    }
  }
  std::printf("model %s\n", args.model.c_str());
  for (const auto& spec : model.inputs()) std::printf("  input  %s\n", spec_text(spec).c_str());
  for (const auto& spec : model.outputs()) std::printf("  output %s\n", spec_text(spec).c_str());

  std::vector<Tensor> inputs;
  std::map<std::string, std::string> unused = args.inputs;
  for (const auto& spec : model.inputs()) {
    auto it = unused.find(spec.name);
    if (it == unused.end() && model.inputs().size() == 1) it = unused.find("");
    if (it == unused.end()) usage("missing --input " + spec.name + "=FILE.npy");
    inputs.push_back(tandem::serialization::read_npy(for_rank(it->second, rank)));
    unused.erase(it);
  }
  if (!unused.empty()) {
    usage("the model has no input called '" + unused.begin()->first + "'");
  }

  std::vector<Tensor> outputs = model.run(inputs);
  std::printf("outputs\n");
  for (size_t o = 0; o < outputs.size(); ++o) print_summary(model.outputs()[o].name, outputs[o]);
  if (!output_dir.empty()) {
    std::filesystem::create_directories(output_dir);
    for (size_t o = 0; o < outputs.size(); ++o) {
      auto path = output_dir / output_files[o];
      tandem::serialization::write_npy(path.string(), outputs[o]);
      std::printf("  wrote %s\n", path.string().c_str());
    }
  }

  if (args.repeat > 0) {
    std::vector<double> ms;
    for (int r = 0; r < args.repeat; ++r) {
      auto start = std::chrono::steady_clock::now();
      for (const Tensor& t : model.run(inputs)) t.wait_to_read();
      ms.push_back(
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
              .count());
    }
    std::sort(ms.begin(), ms.end());
    auto at = [&](double q) {
      return ms[static_cast<size_t>(q * static_cast<double>(ms.size() - 1))];
    };
    std::printf("latency over %d calls (ms): min %.3f  p50 %.3f  p90 %.3f  p99 %.3f  max %.3f\n",
                args.repeat, ms.front(), at(0.5), at(0.9), at(0.99), ms.back());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Arguments args = parse_arguments(argc, argv);
  try {
    return run(args);
  } catch (const tandem::Error& e) {
    std::cerr << "tandem-run: " << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "tandem-run: " << e.what() << "\n";
    return 1;
  }
}
