// Every nn module in one include:
//
//   #include "eager/nn/nn.h"
//   namespace nn = tandem::nn;
//   nn::Sequential net(nn::Linear(2, 16), nn::ReLU(), nn::Linear(16, 2));
//
// module.h      Module: parameters, buffers, children, train/eval, state_dict
// state_dict.h  StateDict and its file format
// init.h        initializers (kaiming_uniform_, xavier_normal_, zeros_, ...)
// linear.h      Linear
// conv.h        Conv1d, Conv2d, Conv3d, ConvTranspose1d, ConvTranspose2d
// norm.h        BatchNorm1d, BatchNorm2d, LayerNorm
// activation.h  ReLU, LeakyReLU, GELU, Sigmoid, Tanh, Softmax, ...
// dropout.h     Dropout           pooling.h  MaxPool2d, AvgPool2d, AdaptiveAvgPool2d
// flatten.h     Flatten           embedding.h  Embedding
// sequential.h  Sequential        containers.h  ModuleList, ModuleDict
// attention.h   scaled_dot_product_attention, MultiheadAttention
// transformer.h TransformerEncoderLayer, TransformerEncoder
// recurrent.h   RNN, LSTM, GRU
// positional_encoding.h  PositionalEncoding (sinusoidal)
// identity.h    Identity          upsample.h   Upsample
#pragma once

#include "eager/nn/activation.h"
#include "eager/nn/attention.h"
#include "eager/nn/containers.h"
#include "eager/nn/conv.h"
#include "eager/nn/dropout.h"
#include "eager/nn/embedding.h"
#include "eager/nn/flatten.h"
#include "eager/nn/identity.h"
#include "eager/nn/init.h"
#include "eager/nn/linear.h"
#include "eager/nn/module.h"
#include "eager/nn/norm.h"
#include "eager/nn/pooling.h"
#include "eager/nn/positional_encoding.h"
#include "eager/nn/recurrent.h"
#include "eager/nn/sequential.h"
#include "eager/nn/state_dict.h"
#include "eager/nn/transformer.h"
#include "eager/nn/upsample.h"
