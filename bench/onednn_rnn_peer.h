// oneDNN's own LSTM and GRU primitives, as a peer for bench_sequence's
// recurrent rows: one layer over [seq 100, batch 32, 256] (the rows'
// workload), forward training then backward, f32, called directly.
//
// Tandem runs its recurrences with its own kernels (Note [Recurrence in one
// op] in eager/nn/recurrent.h), not these primitives; this row is what that
// choice is measured against. A step here is what training with the
// primitives costs: the weights reordered from their plain layout (ldigo)
// into the forward's and the backward's chosen layouts, the forward with
// its workspace, the backward, and the weight gradients reordered back.
// The GRU is oneDNN's "linear before reset" variant, the cell torch and
// Tandem compute.
#pragma once

#include <cstring>
#include <unordered_map>
#include <utility>
#include <vector>

#include <oneapi/dnnl/dnnl.hpp>

#include "bench/harness.h"

namespace bench {

inline void onednn_recurrent_child(bool gru) {
  using dnnl::memory;
  using tag = memory::format_tag;
  using S = SequenceShapes;
  const memory::dim T = S::kLstmLength, N = S::kLstmBatch, C = S::kLstmSize, L = 1, D = 1;
  // Gates per cell; the "linear before reset" GRU has a fourth bias.
  const memory::dim G = gru ? 3 : 4, bias_gates = 4;
  dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  dnnl::stream stream(engine);
  const auto desc = [](memory::dims dims, tag layout) {
    return memory::desc(dims, memory::data_type::f32, layout);
  };
  const memory::desc layer = desc({T, N, C}, tag::tnc), state = desc({L, D, N, C}, tag::ldnc);
  const memory::desc weights_any = desc({L, D, C, G, C}, tag::any);
  const memory::desc weights_plain = desc({L, D, C, G, C}, tag::ldigo);
  const memory::desc bias = desc({L, D, bias_gates, C}, tag::ldgo);
  const memory::desc none;
  const auto direction = dnnl::rnn_direction::unidirectional_left2right;

  // Primitive descriptors: forward training, and the backward that uses it.
  dnnl::primitive_desc_base forward_pd, backward_pd;
  dnnl::primitive forward, backward;
  if (gru) {
    dnnl::lbr_gru_forward::primitive_desc f(
        dnnl::lbr_gru_forward::desc(dnnl::prop_kind::forward_training, direction, layer, state,
                                    weights_any, weights_any, bias, layer, state),
        engine);
    dnnl::lbr_gru_backward::primitive_desc b(
        dnnl::lbr_gru_backward::desc(dnnl::prop_kind::backward, direction, layer, state,
                                     weights_any, weights_any, bias, layer, state, layer, state,
                                     weights_any, weights_any, bias, layer, state),
        engine, f);
    forward = dnnl::lbr_gru_forward(f);
    backward = dnnl::lbr_gru_backward(b);
    forward_pd = f;
    backward_pd = b;
  } else {
    dnnl::lstm_forward::primitive_desc f(
        dnnl::lstm_forward::desc(dnnl::prop_kind::forward_training, direction, layer, state, state,
                                 weights_any, weights_any, bias, layer, state, state),
        engine);
    dnnl::lstm_backward::primitive_desc b(
        dnnl::lstm_backward::desc(dnnl::prop_kind::backward, direction, layer, state, state,
                                  weights_any, weights_any, bias, layer, state, state, layer, state,
                                  state, weights_any, weights_any, bias, layer, state, state),
        engine, f);
    forward = dnnl::lstm_forward(f);
    backward = dnnl::lstm_backward(b);
    forward_pd = f;
    backward_pd = b;
  }
  const auto filled = [&](const memory::desc& d, float value) {
    memory m(d, engine);
    float* p = static_cast<float*>(m.get_data_handle());
    for (size_t i = 0; i < d.get_size() / sizeof(float); ++i) p[i] = value;
    return m;
  };
  // The plain weights a model keeps, and the layouts each pass wants.
  memory weights_layer = filled(weights_plain, 0.01f), weights_iter = filled(weights_plain, 0.01f);
  memory forward_wl(forward_pd.weights_desc(0), engine);
  memory forward_wi(forward_pd.weights_desc(1), engine);
  memory backward_wl(backward_pd.weights_desc(0), engine);
  memory backward_wi(backward_pd.weights_desc(1), engine);
  memory diff_wl(backward_pd.diff_weights_desc(0), engine);
  memory diff_wi(backward_pd.diff_weights_desc(1), engine);
  memory diff_wl_plain(weights_plain, engine), diff_wi_plain(weights_plain, engine);
  memory bias_m = filled(bias, 0.0f), diff_bias = filled(bias, 0.0f);
  memory x = filled(layer, 0.5f), y(layer, engine), diff_y = filled(layer, 1.0f);
  memory diff_x(layer, engine);
  memory h0 = filled(state, 0.0f), c0 = filled(state, 0.0f);
  memory hn(state, engine), cn(state, engine),
      diff_hn = filled(state, 0.0f), diff_cn = filled(state, 0.0f), diff_h0(state, engine),
      diff_c0(state, engine);
  memory workspace(forward_pd.workspace_desc(), engine);

  // Reorders between the plain layout and the chosen ones, made once.
  struct Copy {
    memory from, to;
    dnnl::reorder primitive;
  };
  const auto copies = [](std::vector<std::pair<memory, memory>> pairs) {
    std::vector<Copy> out;
    for (auto& [from, to] : pairs) out.push_back({from, to, dnnl::reorder(from, to)});
    return out;
  };
  std::vector<Copy> to_forward = copies({{weights_layer, forward_wl}, {weights_iter, forward_wi}});
  std::vector<Copy> to_backward =
      copies({{weights_layer, backward_wl}, {weights_iter, backward_wi}});
  std::vector<Copy> gradients_back = copies({{diff_wl, diff_wl_plain}, {diff_wi, diff_wi_plain}});
  const auto run = [&](std::vector<Copy>& list) {
    for (Copy& c : list) c.primitive.execute(stream, c.from, c.to);
  };

  std::unordered_map<int, memory> forward_args{{DNNL_ARG_SRC_LAYER, x},
                                               {DNNL_ARG_SRC_ITER, h0},
                                               {DNNL_ARG_WEIGHTS_LAYER, forward_wl},
                                               {DNNL_ARG_WEIGHTS_ITER, forward_wi},
                                               {DNNL_ARG_BIAS, bias_m},
                                               {DNNL_ARG_DST_LAYER, y},
                                               {DNNL_ARG_DST_ITER, hn},
                                               {DNNL_ARG_WORKSPACE, workspace}};
  std::unordered_map<int, memory> backward_args = forward_args;
  backward_args.insert_or_assign(DNNL_ARG_WEIGHTS_LAYER, backward_wl);
  backward_args.insert_or_assign(DNNL_ARG_WEIGHTS_ITER, backward_wi);
  for (const auto& [arg, m] :
       std::vector<std::pair<int, memory>>{{DNNL_ARG_DIFF_SRC_LAYER, diff_x},
                                           {DNNL_ARG_DIFF_SRC_ITER, diff_h0},
                                           {DNNL_ARG_DIFF_WEIGHTS_LAYER, diff_wl},
                                           {DNNL_ARG_DIFF_WEIGHTS_ITER, diff_wi},
                                           {DNNL_ARG_DIFF_BIAS, diff_bias},
                                           {DNNL_ARG_DIFF_DST_LAYER, diff_y},
                                           {DNNL_ARG_DIFF_DST_ITER, diff_hn}}) {
    backward_args.emplace(arg, m);
  }
  if (!gru) {  // The LSTM's cell state.
    forward_args.emplace(DNNL_ARG_SRC_ITER_C, c0);
    forward_args.emplace(DNNL_ARG_DST_ITER_C, cn);
    backward_args.emplace(DNNL_ARG_SRC_ITER_C, c0);
    backward_args.emplace(DNNL_ARG_DST_ITER_C, cn);
    backward_args.emplace(DNNL_ARG_DIFF_SRC_ITER_C, diff_c0);
    backward_args.emplace(DNNL_ARG_DIFF_DST_ITER_C, diff_cn);
  }

  const auto step = [&] {
    run(to_forward);
    forward.execute(stream, forward_args);
    run(to_backward);
    // The primitive adds into the weight gradients: zero them first, as a
    // training step starts from no gradient.
    for (const memory* m : {&diff_wl, &diff_wi, &diff_bias}) {
      std::memset(m->get_data_handle(), 0, m->get_desc().get_size());
    }
    backward.execute(stream, backward_args);
    run(gradients_back);
    stream.wait();
  };
  sequence_figures(step);
}

}  // namespace bench
