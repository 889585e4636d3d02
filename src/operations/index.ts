/**
 * The /v1 table: every endpoint the gateway serves, declared. A billable POST is marked
 * `idempotent` (it honours Idempotency-Key and its key-rate check rides on its hold): the
 * text operations (`textOperation`) and the media ones (`mediaOperation`) declare it.
 */
import { createBatch } from './batches/create.js';
import { deleteFile, fileContent, listFiles, retrieveFile, uploadFile } from './batches/files.js';
import { cancelBatch, listBatches, retrieveBatch } from './batches/list.js';
import { chatCompletions } from './chat.js';
import { createCompletion } from './completions.js';
import { listBrands, listKnowledge, listModels, readKey, retrieveModel } from './discovery.js';
import { createEmbeddings } from './embeddings.js';
import { createImage } from './images.js';
import { getJob } from './media.js';
import { countMessageTokens, createMessage } from './messages/index.js';
import { createResponse } from './responses.js';
import { createSpeech } from './speech.js';
import type { Operation } from './types.js';
import { videoContent } from './videos/content.js';
import { createVideo } from './videos/create.js';
import { deleteVideo, listVideos } from './videos/list.js';

const get = (path: string, run: Operation['run']): Operation => ({ method: 'GET', path, run });

export const operations: readonly Operation[] = [
  chatCompletions,
  createCompletion,
  createResponse,
  createMessage,
  countMessageTokens,
  createEmbeddings,
  get('/models', listModels),
  get('/models/{id...}', retrieveModel),
  get('/key', readKey),
  get('/brands', listBrands),
  get('/knowledge', listKnowledge),
  createImage,
  get('/images/{id}', (core, ctx) => getJob(core, ctx, 'image')),
  createSpeech,
  createVideo,
  get('/videos', listVideos),
  get('/videos/{id}', (core, ctx) => getJob(core, ctx, 'video')),
  { method: 'DELETE', path: '/videos/{id}', run: deleteVideo },
  get('/videos/{id}/content', videoContent),
  { method: 'POST', path: '/files', run: uploadFile },
  get('/files', listFiles),
  get('/files/{id}', retrieveFile),
  get('/files/{id}/content', fileContent),
  { method: 'DELETE', path: '/files/{id}', run: deleteFile },
  { method: 'POST', path: '/batches', idempotent: true, run: createBatch },
  get('/batches', listBatches),
  get('/batches/{id}', retrieveBatch),
  { method: 'POST', path: '/batches/{id}/cancel', run: cancelBatch },
];
